"""Writing a collection: adds that never touch an existing row, upserts, and deletes by a
`where` the store evaluates when the delete runs, each chunked to the batch limit this Chroma
has (the package docstring lists what the store guarantees and what it does not).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from core.base.chroma.connection import ChromaConnection
from core.base.chroma.errors import VectorStoreError
from core.base.chroma.reads import chunks
from core.base.chroma.unchanged import UnchangedDelete
from core.base.door.chroma_door import DELETE_UNCHANGED
from core.base.rules.rows import ChromaRow


class ChromaWrites(ChromaConnection):
    """The writes of `VectorStore`."""

    async def delete_where(
        self, name: str, *, where: Mapping[str, Any], limit: int | None = None,
        ids: Sequence[str] | None = None,
    ) -> int:
        """Delete the rows matching `where` (at most `limit` of them) in one request, and
        return how many went (evaluated when it runs: see the package docstring)."""
        kwargs: dict[str, Any] = {"where": dict(where)}
        if ids:  # only these ids, and of them only those `where` matches (Chroma ANDs them)
            kwargs["ids"] = list(ids)
        if limit is not None:
            kwargs["limit"] = limit
        result = await self._run(name, "delete", **kwargs)
        deleted = result.get("deleted") if isinstance(result, Mapping) else None
        if not isinstance(deleted, int):
            raise VectorStoreError(
                f"{self.description}: delete on {name!r} did not say how many rows went"
            )
        return deleted

    async def delete_unchanged(self, name: str, *, ids: Sequence[str], digests: Sequence[str],
                               where: Mapping[str, Any]) -> UnchangedDelete:
        """Delete those of `ids` whose content still has the expected digest
        (`content_digests`) and that `where` matches, in one call on the store's one thread
        (read by id, compare, delete the identical ones by id with `where`); the others stay,
        reported as changed or missing.

        Nothing of this process, nor of a command through the door, writes between the read
        and the delete (one thread). A writer outside it may: the delete's `where` then refuses
        a row re-stamped or re-ingested since (the window left: docs/reliability.md)."""
        if not ids:
            return UnchangedDelete(0, (), ())
        result = await self._run(name, DELETE_UNCHANGED, ids=list(ids), digests=list(digests),
                                 where=dict(where))
        deleted = result.get("deleted") if isinstance(result, Mapping) else None
        if not isinstance(deleted, int):
            raise VectorStoreError(
                f"{self.description}: delete on {name!r} did not say how many rows went")
        return UnchangedDelete(deleted, tuple(result.get("changed") or ()),
                               tuple(result.get("missing") or ()))

    async def add(self, name: str, rows: Sequence[ChromaRow]) -> None:
        """Insert rows whose ids are absent, leaving every existing row untouched (see the
        package docstring). Rows need embeddings; chunked to the batch limit."""
        await self.ensure_collection(name)
        for chunk in chunks(list(rows), self.max_batch):
            if any(r.embedding is None for r in chunk):
                raise ValueError("add needs an embedding for every row")
            await self._run(
                name,
                "add",
                ids=[r.id for r in chunk],
                embeddings=[r.embedding for r in chunk],
                metadatas=[dict(r.metadata) or None for r in chunk],
                documents=[r.document for r in chunk],
            )

    async def upsert(self, name: str, rows: Sequence[ChromaRow], *, create: bool = False) -> None:
        """Write rows in chunks of the batch limit; with `create`, make the collection first."""
        if create:
            await self.ensure_collection(name)
        for chunk in chunks(list(rows), self.max_batch):
            await self._run(
                name,
                "upsert",
                ids=[r.id for r in chunk],
                embeddings=[r.embedding for r in chunk]
                if all(r.embedding is not None for r in chunk) else None,
                metadatas=[dict(r.metadata) or None for r in chunk],
                documents=[r.document for r in chunk]
                if all(r.document is not None for r in chunk) else None,
            )
