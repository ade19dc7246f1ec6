"""The compound a pass deletes by: read rows whole by id, compare each with the content its
archive holds (a digest), delete only the identical ones, all as one call on the store's one
thread (`ChromaWrites.delete_unchanged` says what that guarantees where).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.base.io.fence_deadline import refuse_when_late
from core.base.rules.rows import column_page, content_digests

#: Rows re-read whole per `get` inside the compound (as the archive's reads: the client's
#: conversion buffers grow with a read, not with the band).
READ_ROWS = 1_000


@dataclass(frozen=True, slots=True)
class UnchangedDelete:
    """What `delete_unchanged` did: how many rows went, and the ids it kept (their content
    was no longer the expected one) or found gone already."""

    deleted: int
    changed: tuple[str, ...]
    missing: tuple[str, ...]


def delete_unchanged_on(collection: Any, *, ids: Sequence[str], digests: Sequence[str],
                        where: Mapping[str, Any], send_by: float | None = None,
                        action: str = "delete") -> dict[str, Any]:
    """(blocking, on the one Chroma thread) The compound of `delete_unchanged` on a Chroma
    collection: read the rows whole by id, compare each with its expected digest
    (`content_digests`), and delete by id (with `where`) only those identical. The fencing
    deadline `send_by` is looked at after the read, right before the delete request
    (FenceExpired: nothing deleted; `core.base.io.fence_deadline`)."""
    now: dict[str, str] = {}
    for start in range(0, len(ids), READ_ROWS):  # bounded buffers, still one call
        now.update(content_digests(column_page(collection.get(
            ids=list(ids[start:start + READ_ROWS]),
            include=["metadatas", "documents", "embeddings"]))))
    expected = dict(zip(ids, digests, strict=True))
    same = [i for i in ids if now.get(i) == expected[i]]
    deleted: Any = 0
    if same:
        # The `where` as well, on every store: a writer that does not go through this process
        # (another client of the same embedded store, a server's other clients) may re-stamp
        # or re-ingest a row between the compare and the delete; the store then refuses it.
        refuse_when_late(send_by, action)
        result = collection.delete(ids=same, where=dict(where))
        deleted = result.get("deleted") if isinstance(result, Mapping) else None
    return {"deleted": deleted, "changed": [i for i in ids if i in now and i not in same],
            "missing": [i for i in ids if i not in now]}

