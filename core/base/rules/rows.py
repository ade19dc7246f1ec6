"""Rows of a vector collection as plain data, so that rules can be about them without a store.

`ChromaRow` is one row (embeddings as lists of floats, never numpy); `ColumnPage` is a page of
whole rows column by column, as the tombstone archive writes them; `content_digests` says
whether a row is still the one read (the deletion engine deletes only rows whose content is
what their archive holds).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class ChromaRow:
    """One Chroma row as plain data (embeddings as lists of floats, never numpy)."""

    id: str
    metadata: Mapping[str, Any] = field(default_factory=dict)
    document: str | None = None
    embedding: list[float] | None = None


@dataclass(frozen=True, slots=True)
class ColumnPage:
    """Whole rows as Chroma returns them, column by column, for the archive writer.

    Embeddings stay one numpy array: a 384-number embedding costs 3 KB there against ~12 KB
    as Python floats, so a page of 2,000 rows holds ~6 MB of embeddings instead of ~25 MB.
    """

    ids: list[str]
    metadatas: list[Mapping[str, Any]]
    documents: list[str | None]
    #: numpy array (rows x dimensions), or None when the rows have no embeddings.
    embeddings: Any

    def __len__(self) -> int:
        return len(self.ids)


def id_and_metadata(row: Any) -> tuple[Any, Any]:
    """A row's id and metadata, from a `{id, metadata}` mapping (the original's row shape) or
    a ChromaRow-like object; either may be missing (None) in rows read defensively."""
    if isinstance(row, Mapping):
        return row.get("id"), row.get("metadata")
    return getattr(row, "id", None), getattr(row, "metadata", None)


def content_digests(page: ColumnPage) -> dict[str, str]:
    """Per row id of a page of whole rows, a SHA-256 of its content (pure): document,
    metadata (keys sorted; a bool, an int and a float stay apart) and embedding (as float32,
    what Chroma stores, so the float64 copy a client hands back digests alike). Two reads of
    a row digest alike exactly when its document, metadata and embedding are the same."""
    import numpy as np

    digests: dict[str, str] = {}
    embeddings = None if page.embeddings is None else np.asarray(page.embeddings,
                                                                 dtype=np.float32)
    for i, row_id in enumerate(page.ids):
        digest = hashlib.sha256(orjson.dumps([page.documents[i], dict(page.metadatas[i])],
                                             option=orjson.OPT_SORT_KEYS))
        digest.update(b"\0" if embeddings is None else embeddings[i].tobytes())
        digests[row_id] = digest.hexdigest()
    return digests

def column_page(result: Mapping[str, Any]) -> ColumnPage:
    """From a `get` result; missing columns become empty values of the right length."""
    ids = list(result.get("ids") or [])
    metadatas = result.get("metadatas") or [None] * len(ids)
    documents = result.get("documents") or [None] * len(ids)
    embeddings = result.get("embeddings")
    return ColumnPage(ids, [dict(m or {}) for m in metadatas], list(documents),
                      embeddings if embeddings is not None and len(embeddings) else None)
