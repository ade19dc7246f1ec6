"""Reading a collection: counts, rows by id, pages of a `where` scan, ids-only reads, each
paged or chunked under the limits this Chroma has (the package docstring lists them), and the
conversion of a `get` result into rows or columns.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Literal, TypeVar

from core.base.chroma.connection import ChromaConnection
from core.base.rules.rows import ChromaRow, ColumnPage, column_page

T = TypeVar("T")
Include = Literal["metadatas", "documents", "embeddings"]

#: Rows per page of a `where` scan: bounds Chroma's conversion buffers (docs/performance.md),
#: well under the metadata limit.
SCAN_PAGE_ROWS = 2_000
#: Ids per `get(ids=...)`: one SQL variable each, far below the limit.
IDS_PER_GET = 5_000
#: Session ids per `where sessionId $in [...]` lookup.
SESSIONS_PER_WHERE = 1_000


def _rows_from(result: Mapping[str, Any]) -> list[ChromaRow]:
    ids = result.get("ids") or []
    metadatas = result.get("metadatas")
    documents = result.get("documents")
    embeddings = result.get("embeddings")
    rows = []
    for i, row_id in enumerate(ids):
        embedding = None
        if embeddings is not None and len(embeddings) > i and embeddings[i] is not None:
            embedding = _floats(embeddings[i])
        rows.append(
            ChromaRow(
                id=row_id,
                metadata=dict((metadatas[i] if metadatas else None) or {}),
                document=documents[i] if documents else None,
                embedding=embedding,
            )
        )
    return rows


def _floats(vector: Any) -> list[float]:
    """An embedding as a list of Python floats (numpy's `tolist`, in C)."""
    dtype = getattr(vector, "dtype", None)
    if dtype is not None and dtype.kind == "f" and getattr(vector, "ndim", 0) == 1:
        values: list[float] = vector.tolist()
        return values
    return [float(x) for x in vector]



def chunks(items: Sequence[T], size: int) -> list[Sequence[T]]:
    """`items` in consecutive slices of at most `size` (the last one may be shorter)."""
    return [items[i : i + size] for i in range(0, len(items), size)]


class ChromaReads(ChromaConnection):
    """The reads of `VectorStore`."""

    async def count(self, name: str) -> int:
        """Rows in a collection."""
        return int(await self._run(name, "count"))

    async def get_by_ids(
        self, name: str, ids: Sequence[str], *, include: Sequence[Include] = ("metadatas",)
    ) -> list[ChromaRow]:
        """The rows with these ids that exist, in chunks of IDS_PER_GET."""
        rows: list[ChromaRow] = []
        for chunk in chunks(list(dict.fromkeys(ids)), IDS_PER_GET):
            result = await self._run(name, "get", ids=list(chunk), include=list(include))
            rows.extend(_rows_from(result))
        return rows

    async def scan(
        self,
        name: str,
        *,
        where: Mapping[str, Any] | None = None,
        include: Sequence[Include] = ("metadatas",),
        page_rows: int = SCAN_PAGE_ROWS,
        first_page_rows: int | None = None,
    ) -> AsyncIterator[list[ChromaRow]]:
        """Page through every row matching `where`, by offset (the first page of
        `first_page_rows` when given).

        Only for sets nobody is deleting from meanwhile: an offset page over a shrinking set
        skips rows (deleting callers use `ids_where`).
        """
        offset = 0
        limit = first_page_rows or page_rows
        while True:
            result = await self._run(
                name,
                "get",
                where=dict(where) if where else None,
                include=list(include),
                limit=limit,
                offset=offset,
            )
            rows = _rows_from(result)
            if rows:
                yield rows
            if len(rows) < limit:
                return
            offset += len(rows)
            limit = page_rows

    async def metadata_pages(
        self, name: str, *, where: Mapping[str, Any] | None = None,
        page_rows: int = SCAN_PAGE_ROWS,
    ) -> AsyncIterator[ColumnPage]:
        """`scan` for a reader that keeps few rows: ids and metadatas column by column as
        Chroma returns them, under the same rule."""
        offset = 0
        while True:
            result = await self._run(name, "get", where=dict(where) if where else None,
                                     include=["metadatas"], limit=page_rows, offset=offset)
            ids = list(result.get("ids") or [])
            if ids:
                yield ColumnPage(ids, list(result.get("metadatas") or [{}] * len(ids)),
                                 [None] * len(ids), None)
            if len(ids) < page_rows:
                return
            offset += len(ids)

    async def get_where_in(
        self,
        name: str,
        key: str,
        values: Sequence[str],
        *,
        include: Sequence[Include] = ("metadatas",),
    ) -> list[ChromaRow]:
        """Every row whose metadata `key` is one of `values` (chunked `$in`, paged)."""
        rows: list[ChromaRow] = []
        for chunk in chunks(list(dict.fromkeys(values)), SESSIONS_PER_WHERE):
            where = {key: {"$in": list(chunk)}} if len(chunk) > 1 else {key: chunk[0]}
            async for page in self.scan(name, where=where, include=include):
                rows.extend(page)
        return rows

    async def get_page(
        self,
        name: str,
        *,
        where: Mapping[str, Any] | None = None,
        ids: Sequence[str] | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> ColumnPage:
        """Whole rows matching `where`, or with these `ids` (at most IDS_PER_GET), column by
        column (`ColumnPage`), in one `get`."""
        if (where is None) == (ids is None):
            raise ValueError("get_page takes where or ids")
        kwargs: dict[str, Any] = {"include": ["metadatas", "documents", "embeddings"]}
        if where is not None:
            kwargs.update(where=dict(where), limit=limit, offset=offset)
        else:
            assert ids is not None
            if len(ids) > IDS_PER_GET:
                raise ValueError(f"get_page takes at most {IDS_PER_GET} ids")
            kwargs["ids"] = list(dict.fromkeys(ids))
        return column_page(await self._run(name, "get", **kwargs))

    async def any_where(self, name: str, *, where: Mapping[str, Any]) -> bool:
        """Whether any row matches `where`: one ids-only `get` of at most one row (what a
        command asks before it writes under a name, say a repo with chunks)."""
        result = await self._run(name, "get", where=dict(where), include=[], limit=1)
        return bool(result.get("ids"))

    async def ids_where(self, name: str, *, where: Mapping[str, Any],
                        ids: Sequence[str] | None = None) -> list[str]:
        """Every id matching `where` (and among `ids` when given), in ONE ids-only `get`, so no
        row can slip between pages while others write."""
        kwargs: dict[str, Any] = {"ids": list(ids)} if ids else {}
        result = await self._run(name, "get", where=dict(where), include=[], **kwargs)
        return list(result.get("ids") or [])
