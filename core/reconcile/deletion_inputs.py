"""What the deletion engine (`core.reconcile.deletion`) is asked to do: a plan (one reason to
delete, its tenants' rules, its bands) and the target it deletes from and archives to. The
engine's rules are in its module docstring.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.reconcile.rules.restore_holds import HoldEvidence
from core.reconcile.rules.tombstone_bands import Band
from core.reconcile.stores.archives.shared import SharedArchives
from core.reconcile.stores.restore_holds import RestoreHolds

if TYPE_CHECKING:
    from core.base.chroma import VectorStore


@dataclass(frozen=True, slots=True)
class TenantRule:
    """What a fetched row of one tenant must pass to be deleted."""

    #: The rule's verdict on one fetched row's metadata (True: it may go).
    may_delete: Callable[[Mapping[str, Any]], bool]
    #: When the pass started reading this tenant (epoch ms): no band reaches past it.
    read_ms: int
    #: The tenant's evidence the plan was made with, that restore holds are judged against
    #: (`core.reconcile.rules.restore_holds`; None: every hold is in force).
    evidence: HoldEvidence | None = None


@dataclass(frozen=True, slots=True)
class DeletionPlan:
    """One reason to delete, for one tenant or several: see the module docstring."""

    #: What the plan deletes, for its log lines (`stale`, `manifest-orphan`, ...).
    reason: str
    #: What every band's predicate shares (which tenants, and the reason's own clauses):
    #: `predicate_where` adds the band's own.
    clauses: tuple[Mapping[str, Any], ...]
    #: Per tenant of the plan: the rule a fetched row must pass. A matched row of any other
    #: tenant is refused.
    rules: Mapping[str, TenantRule]
    #: Planned by `plan_bands` (or a reason's own cutter) over sorted `ingestedAt` values.
    bands: Sequence[Band]


@dataclass(frozen=True, slots=True)
class DeletionTarget:
    """Where a pass deletes from and archives to; fixed for the whole pass."""

    vectors: VectorStore
    collection: str
    tombstones_dir: Path
    pass_id: str
    #: With the state shared (`stateUrl`): where each band's archives are copied before its
    #: delete, so that any host can restore them (`core.reconcile.stores.archives.shared`); None on
    #: SQLite, where the files are all there is.
    shared: SharedArchives | None = None
    #: The restore holds, re-read for each band right before its delete (None: no state).
    holds: RestoreHolds | None = None
