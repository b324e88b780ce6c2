"""Prefix caching under edits: vLLM's cache_salt for the requests whose KV cache an edit makes
differ from another request's.

vLLM reuses a cached block for a request whose prompt begins with the same tokens (the blocks'
hashes chain from the first, which also takes the request's cache_salt). An edit of a served
request's rows changes the keys and values its prefill writes, so without a salt:
- a request with no edit would read the edited blocks of an earlier tagged request, and
- a tagged request whose prefix is cached from an unedited request would skip the prefill its
  edit is made in, silently.
The engine core (its own process, or the front end's) makes each request's Request from the
EngineCoreRequest the front end sent; Request.from_engine_core_request is wrapped so that the
request's cache_salt first takes the edits that apply to it (requests.cache_salt: requests
with the same edits share blocks, others never; the job's own salt is kept in it). Counted in
the engine core's meta (engine_core_requests_salted).

Nothing here imports vLLM (install_when_loaded takes the module vLLM loaded) or the edits (the
preload hands their salts in).
"""

from __future__ import annotations

REQUEST_MODULE = "vllm.v1.request"
SALTED = {"requests": 0}  # requests given a salt in this process


def install_when_loaded(make_salt, say, after_import):
    """With the job's edits, salts the requests of every engine core made in this process once
    vLLM's request module is loaded. make_salt(): the edits' salts (an object with `needed`
    and of(request) -> salt or None: _edit/requests.py SpecSalt), or None without edits."""
    if make_salt is None:
        return

    def loaded(module):
        cls = getattr(module, "Request", None)
        make = getattr(cls, "from_engine_core_request", None)
        if make is None:
            return
        try:
            salt = make_salt()
        except Exception as exc:  # the worker stops the job on a bad spec and says why
            say(f"tokentrace: the edits' cache salts are not set ({exc})")
            return
        if not salt.needed:
            return
        original = make.__func__

        def from_engine_core_request(klass, request, *args, **kwargs):
            try:
                value = salt.of(request)
            except Exception:  # a request of another shape: as it came
                value = None
            if value is not None:
                request.cache_salt = value
                SALTED["requests"] += 1
            return original(klass, request, *args, **kwargs)

        from_engine_core_request.__wrapped__ = original  # type: ignore[attr-defined]
        cls.from_engine_core_request = classmethod(from_engine_core_request)

    after_import(REQUEST_MODULE, loaded)
