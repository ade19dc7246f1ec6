"""Chroma access: one client per process, every blocking call on one worker thread, every call
paged or chunked to the limits this Chroma has. `VectorStore` is the project's only door to
Chroma, and this package the only code that imports chromadb.

Its modules: `client` builds the chromadb client (server or embedded); `connection` holds it,
its thread and the store lock, and runs every call (`_run`); `memory_core` sends the memory
and summary collections to their own server when `memoryCoreChromaUrl` names one; `reads`
and `writes` are the collection calls (`unchanged` the compound a pass deletes by); `errors`
says what a failed call means.

Facts this package is built around, about chromadb 1.5.9 (embedded and `chroma run` alike
unless said otherwise; timings in docs/performance.md, "Notes moved from the code"):

- a `get` returning metadatas for more than 32,766 rows fails with "too many SQL variables";
  an ids-only `get` has no such limit (100,000 ids in one call); writes take at most
  `get_max_batch_size()` rows (5,461 here); a `$in` list of 50,000 values fails, 10,000 works;
- `delete(where=...)` is one request (one HTTP POST in server mode, one binding call embedded)
  evaluated by the store when it runs, and returns how many rows it removed; with `limit` it
  removes at most that many of the matching rows (never used: the store would choose).
  `delete(ids=..., where=...)` (and a `get` by ids and `where`) costs ~13 ms per id whatever
  the `where`, against microseconds by ids alone: only a band's delete sends it (inside
  `delete_unchanged`, on every store: a writer outside this process can re-stamp a row
  between the compare and the delete, another client of the same embedded store included);
- a numeric `$lt`/`$lte`/`$gt` never matches a row whose key is missing, a string or a bool
  (a bool operand is refused); an integer value is compared with a fractional operand
  truncated toward zero (`$lte 2.5` matches int 2, `$lt 1000.5` does not match int 1000);
  floats compare exactly; `$ne`/`$nin` DO match rows without the key, so they are never used;
- `add` of an id that exists leaves that row untouched (no error); a batch mixing existing and
  absent ids adds the absent ones only, and returns nothing to say which were which;
- embeddings come back as a float64 numpy array holding float32 values (Chroma stores float32).

Collections are opened with no embedding function and telemetry off, so nothing can download a
model or phone home. An embedded store is held by one process at a time (`connection` says
how others reach it).
"""

from __future__ import annotations

from core.base.chroma.client import EMBEDDED_STORE_FILE, STORE_LOCK_NAME
from core.base.chroma.errors import CollectionMissing, VectorStoreError, refused_for_its_data
from core.base.chroma.memory_core import MemoryCoreServer
from core.base.chroma.reads import (
    IDS_PER_GET,
    SCAN_PAGE_ROWS,
    SESSIONS_PER_WHERE,
    ChromaReads,
    Include,
)
from core.base.chroma.writes import ChromaWrites
from core.base.rules.rows import column_page

__all__ = [
    "EMBEDDED_STORE_FILE",
    "IDS_PER_GET",
    "SCAN_PAGE_ROWS",
    "SESSIONS_PER_WHERE",
    "STORE_LOCK_NAME",
    "CollectionMissing",
    "Include",
    "VectorStore",
    "VectorStoreError",
    "column_page",
    "refused_for_its_data",
]


class VectorStore(ChromaReads, ChromaWrites, MemoryCoreServer):
    """The project's only door to Chroma: the connection (`open`, `close`, the one thread;
    the memory core's own server beside it when it has one), its reads and its writes."""
