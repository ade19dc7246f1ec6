"""Whether a restore's hold on a chunk is still in force (pure).

A restore holds every chunk it puts back (CONTRACT "Tombstones"): no pass or retention run
deletes it until the evidence that condemned it changes after the restore, or `tenants release`
lifts the hold. The evidence (`HoldEvidence`, recorded with each hold) is the tenant's config
version and its manifests with their yield snapshots.

A hold **lapses** (`hold_in_force` is False) when, against the evidence a pass judges by:

- the version was raised after the restore (`version >` the hold's), or
- a manifest or yield snapshot was replaced (or another added or removed) after the restore:
  the fingerprint differs and the newest `updatedAt` among them is not older than the hold's.

The second condition keeps a pass that read the tenant's evidence BEFORE a restore (and so
holds an older fingerprint, with older times) from treating the restore's own evidence as a
change: only a later change lapses a hold. A lapsed hold's chunk is judged as any other.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from core.reconcile.rules.manifests import RepoManifest


@dataclass(frozen=True, slots=True)
class HoldEvidence:
    """What a tenant's chunks were judged by at one moment: its config version, and the
    SHA-256 of its manifests and yield snapshots with the newest `updatedAt` among them."""

    version: int
    fingerprint: str
    #: The newest `updatedAt` of the manifests and snapshots (epoch ms; 0 when none).
    updated_at_ms: int


@dataclass(frozen=True, slots=True)
class RestoreHold:
    """One chunk a restore put back, held."""

    tenant_id: str
    chunk_id: str
    #: The file name of the archive it came back from.
    archive: str
    restored_at_ms: int
    evidence: HoldEvidence


def release_command(tenant_id: str) -> str:
    """The command that lifts a tenant's restore holds (for the messages that name it)."""
    return f"kb-tenants release {tenant_id}"


def tenant_evidence(version: int, manifests: Mapping[str, RepoManifest]) -> HoldEvidence:
    """The evidence of a tenant at `version` with these manifests (by repo)."""
    stored: dict[str, Any] = {}
    newest = 0
    for slug in sorted(manifests):
        manifest = manifests[slug]
        entry = manifest.stored()
        newest = max(newest, int(manifest.updated_at))
        snapshot = manifest.extraction_snapshot
        if snapshot is not None:
            entry["extractionSnapshot"] = snapshot.stored()
            newest = max(newest, int(snapshot.updated_at))
        stored[slug] = entry
    digest = hashlib.sha256(orjson.dumps(stored, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return HoldEvidence(version, digest, newest)


def hold_in_force(held: HoldEvidence, current: HoldEvidence) -> bool:
    """Whether a hold recorded with `held` still holds against `current` (the module
    docstring): False once the version was raised or a manifest or snapshot replaced since."""
    if current.version > held.version:
        return False
    return current.fingerprint == held.fingerprint or current.updated_at_ms < held.updated_at_ms


def holds_in_force(holds: Iterable[RestoreHold],
                   current: HoldEvidence | None) -> tuple[frozenset[str], tuple[RestoreHold, ...]]:
    """The ids these holds keep against `current`, and the holds that lapsed. With no
    evidence to judge by (None: a retention run, a grouped plan), every hold is in force."""
    kept: set[str] = set()
    lapsed: list[RestoreHold] = []
    for hold in holds:
        if current is None or hold_in_force(hold.evidence, current):
            kept.add(hold.chunk_id)
        else:
            lapsed.append(hold)
    return frozenset(kept), tuple(lapsed)
