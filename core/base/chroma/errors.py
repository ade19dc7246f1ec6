"""What a failed Chroma call means to the project: the two errors callers catch, what its
text may say (`failure_text`: the store's answer, reduced and scrubbed), whether a refusal was
for the request's data or an outage, and a daemon's store error rebuilt for the command beside
it (`core.base.door.chroma_door`).

chromadb is imported inside the functions that need it, so that importing the errors costs
commands such as `enqueue` and `status` nothing.
"""

from __future__ import annotations

from core.base.rules.errors import KbError, StoreUnavailable
from core.base.rules.secrets import Secrets, foreign_message


class CollectionMissing(KbError):
    """The named collection does not exist in this store (back-fill reason `no-collection`)."""


class VectorStoreError(StoreUnavailable):
    """A Chroma call failed (server down, store error); the caller's work is retried later."""


def failure_text(exc: BaseException, secrets: Secrets) -> str:
    """What a failed Chroma call says, as it may travel on: the store's answer reduced,
    scrubbed and cut (`core.base.rules.secrets.foreign_message`), else the exception's type
    name. A refusal may quote the request, token and all, in any encoding: this is the one
    place such an answer is read, and the exception's `args` are replaced too, so a logged
    traceback or chained cause carries nothing more."""
    text = foreign_message(str(exc), secrets) or type(exc).__name__
    exc.args = (text,)
    return text


def refused_for_its_data(error: VectorStoreError) -> bool:
    """Whether Chroma refused the request for what it asked (a 400/413 ChromaError), or the
    client did before sending it (ValueError, TypeError); anything else is an outage."""
    import chromadb.errors

    cause = error.__cause__
    if isinstance(cause, chromadb.errors.ChromaError):
        return cause.code() in (400, 413)
    return isinstance(cause, (ValueError, TypeError))


def peer_error(classes: list[tuple[str, str]], message: str) -> Exception:
    """A store error raised in the daemon, rebuilt for the command beside it with the same
    class and text, so it is judged as the original would be; anything else is an outage."""
    import chromadb.errors

    for module, name in classes:
        if module == "builtins" and name in ("ValueError", "TypeError"):
            return ValueError(message) if name == "ValueError" else TypeError(message)
        if module == chromadb.errors.__name__:
            kind = getattr(chromadb.errors, name, None)
            if isinstance(kind, type) and issubclass(kind, chromadb.errors.ChromaError):
                return kind(message)
    return RuntimeError(message)
