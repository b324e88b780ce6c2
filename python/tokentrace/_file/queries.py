"""The readers' SQL, by name: each query the package's readers (_read/) ask a trace file,
kept here in the file room beside the opening rules, so a schema change is met in one place.
TraceFile.ask(name, args) runs one (its rows); TraceFile.ask_named(name, args) gives its rows
as {column: value}.

Queries whose text depends on the file (the C++ readers' token SELECTs, a window of calls)
are still built by their callers (issue 43: moving the rest is under way).
"""

QUERIES = {
    # the sites a file lists, and which of them its calls (or the writer's summaries) name
    "sites": "SELECT id, name, kind, is_token FROM sites ORDER BY id",
    "called_sites": "SELECT DISTINCT site_id FROM calls",
    "called_sites_summarized": "SELECT DISTINCT site_id FROM site_stats",
    # each call's own kernels and GPU busy time, and the calls' parents to add subtrees up
    "call_gpu": "SELECT call_id, kernels, gpu_busy_ns FROM call_gpu",
    "children_last_first": ("SELECT id, parent_id FROM calls WHERE parent_id IS NOT NULL "
                            "ORDER BY id DESC"),
    # the calls' output tensors (shapes, dtypes) in the order written, and the saved ones
    "call_outputs": "SELECT call_id, path, shape, dtype FROM call_outputs ORDER BY rowid",
    "saved_outputs": "SELECT call_id, file, key FROM saved_outputs",
    # every call in id order (a parent before its children), for the op labels
    "calls_in_order": "SELECT id, site_id, k, parent_id, token FROM calls ORDER BY id",
    # the calls of one site: (id, k)
    "calls_of_site": "SELECT id, k FROM calls WHERE site_id = ?",
    # the op records' data flow
    "op_links": "SELECT call_id, inputs, outputs FROM op_links ORDER BY rowid",
    # a serving engine's steps and requests
    "step_requests": ("SELECT token, request, prefill_tokens, decode_tokens, position "
                      "FROM step_requests ORDER BY token, rowid"),
    "request_events": "SELECT * FROM request_events ORDER BY queued_ns, rowid",
}
