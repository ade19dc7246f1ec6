"""A manifest's `extractionSnapshot` (pure): the paths one extraction profile yields, recorded
by `tenants set-yield` beside the repo's manifest (the successor's yield authority; the
manifest's `pathsAfterPush` stays the authority on physical deletion). See
`core.reconcile.rules.generations.orphans`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeGuard

from core.base.rules.numbers import is_real_number

SNAPSHOT_KEY: Final = "extractionSnapshot"
_HEX64: Final = re.compile(r"[a-f0-9]{64}")

Number = int | float


def is_extraction_identity(value: Any) -> TypeGuard[str]:
    """A sha256 hex digest: 64 lowercase hex characters."""
    return isinstance(value, str) and _HEX64.fullmatch(value) is not None


@dataclass(frozen=True, slots=True)
class ExtractionSnapshot:
    """A manifest's `extractionSnapshot`: what the profile of one identity yields."""

    yielded_source_paths: tuple[str, ...]
    extraction_identity: str
    updated_at: Number

    def stored(self) -> dict[str, Any]:
        """As the manifest entry stores it."""
        return {"yieldedSourcePaths": list(self.yielded_source_paths),
                "extractionIdentity": self.extraction_identity, "updatedAt": self.updated_at}


def snapshot_from(entry: Any) -> ExtractionSnapshot | None:
    """The usable snapshot of a stored manifest entry: a list of paths, a 64-hex identity and
    a finite `updatedAt`; None otherwise (unknown, never empty)."""
    snap = entry.get(SNAPSHOT_KEY) if isinstance(entry, Mapping) else None
    if not isinstance(snap, Mapping):
        return None
    paths, identity, updated = (snap.get("yieldedSourcePaths"), snap.get("extractionIdentity"),
                                snap.get("updatedAt"))
    if not (isinstance(paths, list) and is_extraction_identity(identity)
            and is_real_number(updated)):
        return None
    return ExtractionSnapshot(tuple(sorted({p for p in paths if isinstance(p, str) and p})),
                              identity, updated)


