"""What a failed Chroma call means to the project: the two errors callers catch, what its
text may say (`failure_text`: the store's answer, reduced and scrubbed), whether a refusal was
for the request's data or an outage, and a daemon's store error rebuilt for the command beside
it (`core.base.door.chroma_door`).

chromadb is imported inside the functions that need it, so that importing the errors (every
job does) costs nothing: `import chromadb` costs seconds that commands such as `enqueue` and
`status` should not pay.
"""

from __future__ import annotations

from core.base.rules.errors import KbError, StoreUnavailable
from core.base.rules.secrets import Secrets, foreign_message


class CollectionMissing(KbError):
    """The named collection does not exist in this store (back-fill reason `no-collection`)."""


class VectorStoreError(StoreUnavailable):
    """A Chroma call failed (server down, store error); the caller's work is retried later."""


def failure_text(exc: BaseException, secrets: Secrets) -> str:
    """What a failed Chroma call says, as it may travel on (an error line, a log, `--json`,
    `daemon_ticks`): the store's answer reduced to its parsed message, scrubbed of every form
    of the token and of anything opaque, and cut (`core.base.rules.secrets.foreign_message`); the
    exception's own type name when that leaves nothing. A server or a proxy that refuses a
    request may quote it back, the token in it, in any encoding: this is the one place where
    such an answer is read. The exception is made to say only this too (its `args`
    replaced), so that a logged traceback or a chained cause carries nothing more."""
    text = foreign_message(str(exc), secrets) or type(exc).__name__
    exc.args = (text,)
    return text


def refused_for_its_data(error: VectorStoreError) -> bool:
    """Whether Chroma refused the request for what it asked (a 400/413 ChromaError: an invalid
    argument, a duplicate id, a batch too big), or the client did before sending it (a
    ValueError or TypeError). A server error, a rate limit, a refused connection, a timeout
    is an outage."""
    import chromadb.errors

    cause = error.__cause__
    if isinstance(cause, chromadb.errors.ChromaError):
        return cause.code() in (400, 413)
    return isinstance(cause, (ValueError, TypeError))


def peer_error(classes: list[tuple[str, str]], message: str) -> Exception:
    """A store error raised in the daemon, rebuilt for the command beside it: the same Chroma
    error class (or ValueError/TypeError) with the same text, so `VectorStore._run` and
    `refused_for_its_data` judge it as they would the original; anything else is an outage."""
    import chromadb.errors

    for module, name in classes:
        if module == "builtins" and name in ("ValueError", "TypeError"):
            return ValueError(message) if name == "ValueError" else TypeError(message)
        if module == chromadb.errors.__name__:
            kind = getattr(chromadb.errors, name, None)
            if isinstance(kind, type) and issubclass(kind, chromadb.errors.ChromaError):
                return kind(message)
    return RuntimeError(message)
