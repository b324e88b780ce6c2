"""Errors and warnings that tokentrace raises to users.

Every message is one line that says what was wrong and what is accepted. Errors raised from
inside a hook never escape into the traced job (see _record/hooks.py); errors about arguments are
raised before any model work starts.
"""

from typing import NoReturn


class TokentraceError(ValueError):
    """A bad argument, selector, path or file. The message says what is accepted."""

    def __init__(self, message):
        if not message.startswith("tokentrace:"):
            message = "tokentrace: " + message
        super().__init__(message)


class ScalarEscapeWarning(UserWarning):
    """The traced code read device values on the host (a scalar escape).

    Decisions made from such reads (generate's stopping check, for example) happen on the
    host and are not part of the recorded trace.
    """


def fail(message: str) -> NoReturn:
    """Raises TokentraceError with `message`, hiding our own frames from the traceback."""
    err = TokentraceError(message)
    err.__suppress_context__ = True
    raise err


class EditSkipWarning(UserWarning):
    """An edit matched a call but did not fit the output there (an index past the sequence
    length, an operand that does not broadcast to the box at that shape): the patch table
    skipped and counted it. bound.last_report.num_skips / .skip_reasons say which and why.
    Also: an op rule selecting by label (tt.label, ...) chose no op in a run."""
