"""Copying the state from SQLite to PostgreSQL (`kb-migrate`): what "copied exactly" means (pure).

A table is verified by its row count and a checksum over a canonical rendering of every row,
computed on both sides from the values each driver reads back. The checksum is a multiset
digest (the sum of each row's SHA-256, modulo 2**256), so it does not depend on the order the
rows are read in: SQLite and PostgreSQL need not agree on a collation for two equal tables to
give equal digests, while any changed, lost or duplicated row changes it.

JSON columns stay TEXT on PostgreSQL (`core.base.state.postgres.schema`), so their text is copied
and compared byte for byte; text that is not strict JSON (an earlier version wrote `Infinity`)
is kept as it is, exactly as the PostgreSQL backend keeps it: read through `kb_jsonb` as
unreadable and replaced, not merged, on the row's next write, as SQLite's `json_valid` does.
Such rows are counted (`is_strict_json`) and reported, never refused.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

#: The columns holding JSON text, by table (what `invalidJson` counts).
JSON_COLUMNS: Mapping[str, tuple[str, ...]] = {
    "nodes": ("properties",),
    "edges": ("properties",),
    "kb_ingestion_metrics": ("detail",),
    "daemon_ticks": ("figures",),
}

_MODULUS = 1 << 256


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def is_strict_json(text: object) -> bool:
    """Whether `text` is JSON that PostgreSQL's jsonb accepts: a string that parses with no
    `NaN`/`Infinity` constant (Python's parser accepts those; jsonb and SQLite's json_valid
    do not). NULL counts as valid (the column allows it: nothing to replace)."""
    if text is None:
        return True
    if not isinstance(text, str):
        return False
    try:
        json.loads(text, parse_constant=_refuse_constant)
    except ValueError:
        return False
    return True


def canonical_value(value: object) -> object:
    """A value as both drivers can render it alike: None, int, str, a float that is finite
    as its shortest repr (NaN/±Inf by name), bytes as hex. A bool is an int (SQLite has no
    bool)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f"float:{value}"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "bytes:" + bytes(value).hex()
    return value


def row_digest(values: Sequence[object]) -> int:
    """The SHA-256 of one row's canonical rendering (type-tagged: the integer 1 and the text
    "1" differ), as an integer."""
    rendered = json.dumps([[type(v).__name__, v] for v in map(canonical_value, values)],
                          ensure_ascii=False, separators=(",", ":"))
    return int.from_bytes(hashlib.sha256(rendered.encode("utf-8", "surrogatepass")).digest(),
                          "big")


@dataclass(slots=True)
class TableTally:
    """A table's row count and multiset digest, built a row at a time (memory: one row)."""

    rows: int = 0
    digest: int = 0

    def add(self, values: Sequence[object]) -> None:
        """Count one row."""
        self.rows += 1
        self.digest = (self.digest + row_digest(values)) % _MODULUS

    @property
    def checksum(self) -> str:
        """The digest as 64 hex digits (what the report shows)."""
        return f"{self.digest:064x}"


@dataclass(frozen=True, slots=True)
class TableCheck:
    """One table's verdict: the source's figures, the target's, and whether they match."""

    table: str
    source_rows: int
    target_rows: int
    source_checksum: str
    target_checksum: str
    invalid_json: int = 0

    @property
    def matches(self) -> bool:
        """Same row count and same checksum."""
        return (self.source_rows == self.target_rows
                and self.source_checksum == self.target_checksum)


def check_table(table: str, source: TableTally, target: TableTally, *,
                invalid_json: int = 0) -> TableCheck:
    """The verdict on one copied table."""
    return TableCheck(table, source.rows, target.rows, source.checksum, target.checksum,
                      invalid_json)


def first_mismatch(checks: Sequence[TableCheck]) -> TableCheck | None:
    """The first table (in copy order) whose copy differs from its source, or None."""
    return next((c for c in checks if not c.matches), None)


def mismatch_reason(check: TableCheck) -> str:
    """One line naming the table and what differs."""
    if check.source_rows != check.target_rows:
        return (f"table {check.table}: {check.source_rows} rows in the source, "
                f"{check.target_rows} in the target")
    return f"table {check.table}: checksums differ ({check.source_rows} rows each)"


@dataclass(frozen=True, slots=True)
class CopyPlan:
    """Which columns of a table are copied, and which target-only columns are filled how."""

    table: str
    #: The columns both sides have, in the source's order: copied and checksummed.
    columns: tuple[str, ...]
    #: Target-only columns given one value for every row (`drain_generations.drainer`).
    filled: Mapping[str, str] = field(default_factory=dict)


class SchemaMismatch(ValueError):
    """The source has a column the target lacks: copying would lose it."""


def plan_table(table: str, *, source_columns: Sequence[str], target_columns: Sequence[str],
               defaulted: Sequence[str], filled: Mapping[str, str]) -> CopyPlan:
    """The copy of one table: every source column must exist in the target (else
    SchemaMismatch: a newer SQLite file than this program's PostgreSQL schema); a target-only
    column must be one this program fills (`filled`) or one the target fills itself
    (`defaulted`: a default or an identity), else SchemaMismatch as well."""
    missing = [c for c in source_columns if c not in target_columns]
    if missing:
        raise SchemaMismatch(f"table {table}: the target has no column {', '.join(missing)}")
    extra = [c for c in target_columns if c not in source_columns]
    unfilled = [c for c in extra if c not in filled and c not in defaulted]
    if unfilled:
        raise SchemaMismatch(f"table {table}: nothing to put in target column "
                             f"{', '.join(unfilled)}")
    return CopyPlan(table, tuple(source_columns),
                    {c: v for c, v in filled.items() if c in extra})
