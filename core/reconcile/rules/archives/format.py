"""Tombstone archive lines (pure): the header, the chunk lines, and their checksums.

An archive is a JSON-lines file, one per tenant per pass:

- line 1, the **header**: `{"format": 2, "kind": "header", "collection", "tenantId",
  "passId", "createdAt"}`;
- then one **chunk** line per archived row: `{"format": 2, "kind": "chunk", "collection",
  "tenantId", "passId", "archivedAt", "id", "metadata", "document", "embedding"}`;
- and, after a band's chunk lines, a **withdrawn** line when some were not deleted:
  `{"format": 2, "kind": "withdrawn", "collection", "tenantId", "passId", "withdrawnAt",
  "ids"}`, which withdraws those ids' chunk lines above it (restore skips them).

Every line ends with `"sha256"`: the SHA-256 of the line's own bytes without that key, so a
line torn by a crash or edited by hand fails its check. It guards against accidents, not
forgery: a forged line is still held to `refusal`, which does not depend on it.

Embeddings are written as float32 (what Chroma stores), so a restored chunk has bit for bit
the embedding it was deleted with. Format 1 archives (before headers and checksums) are still
read: they are the only copy of chunks deleted before the upgrade.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from core.base.rules.numbers import is_real_number, is_whole_number
from core.base.rules.rows import ChromaRow, ColumnPage

#: The format this version writes; `FIRST_FORMAT` is still read.
ARCHIVE_FORMAT: Final = 2
FIRST_FORMAT: Final = 1
ARCHIVE_SUFFIX: Final = ".jsonl"
KIND_HEADER: Final = "header"
KIND_CHUNK: Final = "chunk"
KIND_WITHDRAWN: Final = "withdrawn"
#: A withdrawn line's kind as `seal` writes it: restore unseals only lines holding it twice.
WITHDRAWN_MARK: Final = b'"kind":"withdrawn"'
TENANT_KEY: Final = "tenantId"
_CHECKSUM_SUFFIX = re.compile(rb',"sha256":"([0-9a-f]{64})"\}\s*$')

FIRST_FORMAT_WARNING: Final = (
    "format-1 archive (written before archives had headers and checksums): restored "
    "preserve-live, for its own tenant and the knowledge-base collection only, but an edited "
    "line cannot be detected"
)


def seal(record: Mapping[str, Any]) -> bytes:
    """One archive line (without its newline): `record` as compact JSON, its checksum the last
    key. orjson writes NaN and infinity as `null`, so callers refuse them first."""
    body = orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY)
    digest = hashlib.sha256(body).hexdigest()
    return body[:-1] + b',"sha256":"' + digest.encode("ascii") + b'"}'


def unseal(line: bytes) -> dict[str, Any]:
    """The record of a sealed line; ValueError naming what is wrong (torn, edited, not JSON)."""
    found = _CHECKSUM_SUFFIX.search(line)
    if found is None:
        raise ValueError("no checksum at the end of the line (torn, or not written by an archive)")
    body = line[: found.start()] + b"}"
    if hashlib.sha256(body).hexdigest() != found.group(1).decode("ascii"):
        raise ValueError("checksum mismatch (the line was changed after it was written)")
    return json_object(body)


def json_object(raw: bytes) -> dict[str, Any]:
    """A JSON object from bytes; ValueError naming what is wrong otherwise."""
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    return record


@dataclass(frozen=True, slots=True)
class ArchiveHeader:
    """Whose chunks an archive holds and which pass wrote it."""

    collection: str
    tenant_id: str
    pass_id: str
    created_at_ms: int
    format: int = ARCHIVE_FORMAT

    def record(self) -> dict[str, Any]:
        """The header line's record (before sealing)."""
        return {"format": self.format, "kind": KIND_HEADER, "collection": self.collection,
                "tenantId": self.tenant_id, "passId": self.pass_id,
                "createdAt": self.created_at_ms}


@dataclass(frozen=True, slots=True)
class ArchivedChunk:
    """One archived chunk: where it lived, which pass archived it, and the row itself."""

    collection: str
    tenant_id: str
    row: ChromaRow
    pass_id: str | None = None


def _float32_exact(embeddings: Any) -> Any:
    """The page's embeddings as float32 when that loses nothing, else as they are; refuses NaN
    and infinity."""
    import numpy as np

    array = np.asarray(embeddings)
    if not np.isfinite(array).all():
        raise ValueError("an embedding holds NaN or infinity; refusing to archive it")
    narrow = array.astype(np.float32)
    return narrow if np.array_equal(narrow, array) else array


def chunk_lines(
    page: ColumnPage, *, header: ArchiveHeader, archived_at_ms: int
) -> list[bytes]:
    """The sealed lines of a page of whole rows (pure). ValueError for a row without an
    embedding or with a value JSON cannot hold exactly: its restore would not give back what
    was deleted, so it must not be deleted."""
    if len(page) and page.embeddings is None:
        raise ValueError(f"chunk {page.ids[0]!r} has no embedding; refusing to archive it")
    embeddings = _float32_exact(page.embeddings) if len(page) else ()
    lines = []
    for i, row_id in enumerate(page.ids):
        metadata = page.metadatas[i]
        bad = [k for k, v in metadata.items() if isinstance(v, float) and not math.isfinite(v)]
        if bad:
            raise ValueError(f"chunk {row_id!r}: metadata {bad[0]!r} is not a finite number")
        lines.append(seal({
            "format": ARCHIVE_FORMAT, "kind": KIND_CHUNK, "collection": header.collection,
            "tenantId": header.tenant_id, "passId": header.pass_id,
            "archivedAt": archived_at_ms, "id": row_id, "metadata": metadata,
            "document": page.documents[i], "embedding": embeddings[i],
        }))
    return lines


def withdrawn_line(header: ArchiveHeader, ids: list[str], *, withdrawn_at_ms: int) -> bytes:
    """The sealed line withdrawing these ids' chunk lines above it (pure)."""
    return seal({"format": ARCHIVE_FORMAT, "kind": KIND_WITHDRAWN,
                 "collection": header.collection, "tenantId": header.tenant_id,
                 "passId": header.pass_id, "withdrawnAt": withdrawn_at_ms, "ids": ids})


def withdrawn_ids(record: Mapping[str, Any], *, tenant_id: str,
                  pass_id: str | None) -> list[str] | None:
    """The ids an unsealed line withdraws, or None when it is no withdrawn line; ValueError
    for a malformed one or one of another tenant or pass."""
    if record.get("kind") != KIND_WITHDRAWN or record.get("format") != ARCHIVE_FORMAT:
        return None
    ids = record.get("ids")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise ValueError("a withdrawn line's ids must be a list of strings")
    if record.get("tenantId") != tenant_id or record.get("passId") != pass_id:
        raise ValueError("a withdrawn line of another tenant or pass")
    return ids


def _require_string(record: Mapping[str, Any], name: str) -> str:
    value = record.get(name)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string")
    return value


def parse_header(record: Mapping[str, Any]) -> ArchiveHeader:
    """The header of a format-2 archive from its (unsealed) record; ValueError otherwise."""
    if record.get("format") != ARCHIVE_FORMAT or record.get("kind") != KIND_HEADER:
        raise ValueError("not an archive header")
    created = record.get("createdAt")
    if not is_whole_number(created):
        raise ValueError("createdAt must be an integer")
    return ArchiveHeader(_require_string(record, "collection"),
                         _require_string(record, "tenantId"),
                         _require_string(record, "passId"), created)


def parse_chunk(record: Mapping[str, Any], *, expected_format: int) -> ArchivedChunk:
    """An archived chunk from an unsealed (format 2) or plain (format 1) record; ValueError
    otherwise."""
    found = record.get("format")
    if found != expected_format:
        raise ValueError(f"archive format {found!r} in a format-{expected_format} archive")
    if expected_format == ARCHIVE_FORMAT and record.get("kind") != KIND_CHUNK:
        raise ValueError(f"a {record.get('kind')!r} line where a chunk was expected")
    row_id = _require_string(record, "id")
    collection = _require_string(record, "collection")
    tenant = _require_string(record, "tenantId")
    embedding = record.get("embedding")
    if not isinstance(embedding, list) or not embedding or not all(map(is_real_number, embedding)):
        raise ValueError("embedding must be a non-empty list of finite numbers")
    metadata = record.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise ValueError("metadata must be an object")
    document = record.get("document")
    if document is not None and not isinstance(document, str):
        raise ValueError("document must be a string or null")
    pass_id = record.get("passId") if expected_format == ARCHIVE_FORMAT else None
    return ArchivedChunk(collection, tenant,
                         ChromaRow(row_id, metadata, document, _as_stored(embedding)),
                         pass_id if isinstance(pass_id, str) else None)


def _as_stored(embedding: list[Any]) -> list[float]:
    """An embedding as Chroma will hold it (float32, as Python floats), so an archived row
    compares equal to the row Chroma returns before the delete and after the restore."""
    import numpy as np

    with np.errstate(over="ignore"):
        narrow = np.asarray(embedding, dtype=np.float64).astype(np.float32)
    if not np.isfinite(narrow).all():
        raise ValueError("embedding holds a number too large for float32")
    values: list[float] = narrow.astype(np.float64).tolist()
    return values


def refusal(chunk: ArchivedChunk, *, collection: str, tenant_id: str,
            pass_id: str | None) -> str | None:
    """Why a well-formed line does not belong in this restore (pure), or None when it does."""
    if chunk.collection != collection:
        return (f"collection {chunk.collection!r} is not the knowledge-base collection "
                f"{collection!r}")
    if chunk.tenant_id != tenant_id:
        return f"tenant {chunk.tenant_id!r} differs from the archive's tenant {tenant_id!r}"
    owner = chunk.row.metadata.get(TENANT_KEY)
    if owner != tenant_id:
        return f"metadata tenantId {owner!r} differs from the archive's tenant {tenant_id!r}"
    if pass_id is not None and chunk.pass_id != pass_id:
        return f"pass {chunk.pass_id!r} differs from the archive's pass {pass_id!r}"
    return None
