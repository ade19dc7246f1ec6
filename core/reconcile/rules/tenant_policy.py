"""Per-tenant reconciliation policy (pure): what a tenant's `kb-config:` node may override, how
an override and the `[knowledgeBase]` values combine, and where each value in force comes from.

The policy lives in the tenant's configuration node, `properties.reconciliationPolicy` =
`{orphanVersionGap?, manifestGraceMs?, autoTombstone?}` (CONTRACT "Graph store"); a key that is
absent inherits the `[knowledgeBase]` value. Writing a policy never raises the tenant's version:
a version change makes chunks stale, a policy change only changes what is done about them.

Fail closed, as the global settings do: an invalid stored value makes nothing actionable by
what it governs, never falls back to the global value, which may be looser. `autoTombstone` is
`inherit` (the default), `off` (exempts the tenant from a global `true`) or `on`, which does
**not** override a global `false`: `reconciliationAutoTombstone` stays the one master opt-in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from core.base.rules.numbers import is_real_number, is_whole_number
from core.reconcile.rules.reconcile import ReconcilePolicy
from core.reconcile.rules.retention import (
    POLICY_MAX_AGE,
    POLICY_MAX_COUNT,
    valid_max_age,
    valid_max_count,
)

POLICY_PROPERTY: Final = "reconciliationPolicy"
GAP_KEY: Final = "orphanVersionGap"
GRACE_KEY: Final = "manifestGraceMs"
AUTO_KEY: Final = "autoTombstone"
AUTO_INHERIT: Final = "inherit"
AUTO_ON: Final = "on"
AUTO_OFF: Final = "off"
AUTO_CHOICES: Final = (AUTO_INHERIT, AUTO_ON, AUTO_OFF)

#: Where a value in force comes from (`tenants show`).
FROM_TENANT: Final = "tenant policy"
FROM_CONFIG: Final = "[knowledgeBase]"
FROM_INVALID: Final = "invalid: fails closed"


def valid_gap(value: Any) -> bool:
    """An orphan version gap: a finite number >= 1 (a bool is not). Any other value fails
    closed (nothing is actionable by version: a looser default such as 2 could delete what a
    stricter intended value would have kept). The floor is 1 because every stale chunk has a
    gap of at least 1: 1 means "no grace", and anything lower would look like a typo."""
    return is_real_number(value) and value >= 1


def valid_grace(value: Any) -> bool:
    """A manifest grace: a whole number of milliseconds >= 0 (a bool is not)."""
    return is_whole_number(value) and value >= 0


@dataclass(frozen=True, slots=True)
class PolicyValue:
    """One value in force and where it comes from (JSON: `{value, source}`)."""

    value: Any
    source: str


@dataclass(frozen=True, slots=True)
class TenantPolicy:
    """A tenant's reconciliation policy in force (each value resolved, its source named)."""

    #: None: nothing is actionable by version (an invalid gap, here or global).
    orphan_version_gap: PolicyValue
    #: None: no manifest orphan is actionable (an invalid grace, here or global).
    manifest_grace_ms: PolicyValue
    auto_tombstone: PolicyValue
    #: As stored (`inherit` for an absent autoTombstone).
    auto_tombstone_setting: str
    #: Stored keys whose value was invalid (each fails closed).
    invalid_keys: tuple[str, ...] = ()

    @property
    def gap(self) -> float | None:
        """The gap in force (None: closed)."""
        value: float | None = self.orphan_version_gap.value
        return value

    @property
    def grace_ms(self) -> int | float | None:
        """The manifest grace in force (None: closed)."""
        value: int | float | None = self.manifest_grace_ms.value
        return value

    @property
    def deletes(self) -> bool:
        """Whether this tenant's actionable chunks may be tombstoned."""
        return self.auto_tombstone.value is True


def _overridden(
    stored: Mapping[str, Any], key: str, global_value: Any, valid: Any, invalid: list[str]
) -> PolicyValue:
    """The tenant's value when it set one, else the global one (None when invalid)."""
    if key in stored:
        if valid(stored[key]):
            return PolicyValue(stored[key], FROM_TENANT)
        invalid.append(key)
        return PolicyValue(None, f"{FROM_TENANT} ({FROM_INVALID}: {stored[key]!r})")
    if valid(global_value):
        return PolicyValue(global_value, FROM_CONFIG)
    return PolicyValue(None, f"{FROM_CONFIG} ({FROM_INVALID})")


def resolve_tenant_policy(
    stored: Any, *, global_gap: Any, global_grace_ms: Any, global_auto_tombstone: bool
) -> TenantPolicy:
    """The policy in force for a tenant whose node holds `stored` (anything: read defensively)
    under the `[knowledgeBase]` values given (an invalid one, `math.inf`, fails closed here too)."""
    policy = stored if isinstance(stored, Mapping) else {}
    invalid: list[str] = []
    if stored is not None and not isinstance(stored, Mapping):
        invalid.append(POLICY_PROPERTY)
    gap = _overridden(policy, GAP_KEY, global_gap, valid_gap, invalid)
    grace = _overridden(policy, GRACE_KEY, global_grace_ms, valid_grace, invalid)
    # A null is `inherit` too: what `inherit` leaves on a graph whose merge deletes no key
    # (the original's, `core.base.rules.neo_graph`), where it cannot remove the key.
    setting = policy.get(AUTO_KEY)
    if setting is None:
        setting = AUTO_INHERIT
    if setting not in AUTO_CHOICES:
        invalid.append(AUTO_KEY)
        auto = PolicyValue(False, f"{FROM_TENANT} ({FROM_INVALID}: {setting!r})")
        setting = repr(setting)
    elif setting == AUTO_OFF:
        auto = PolicyValue(False, FROM_TENANT)
    elif setting == AUTO_ON:
        # `on` cannot open what the master switch keeps shut.
        auto = PolicyValue(global_auto_tombstone is True,
                           FROM_TENANT if global_auto_tombstone is True
                           else f"{FROM_CONFIG} (master switch off; the tenant's on waits)")
    else:
        auto = PolicyValue(global_auto_tombstone is True, FROM_CONFIG)
    return TenantPolicy(gap, grace, auto, str(setting), tuple(invalid))


def resolve_policy(stored: Any, policy: ReconcilePolicy) -> TenantPolicy:
    """The policy in force for a tenant whose node holds `stored`, under the pass's."""
    return resolve_tenant_policy(stored, global_gap=policy.orphan_version_gap,
                                 global_grace_ms=policy.manifest_grace_ms,
                                 global_auto_tombstone=policy.auto_tombstone)


def policy_patch(
    *, gap: float | None, grace_ms: int | None, auto_tombstone: str | None,
    gc_max_age_ms: float | None = None, gc_max_count: int | None = None,
) -> dict[str, Any]:
    """The JSON merge patch `set-policy` writes (`inherit` nulls `autoTombstone`, the others
    kept). Raises ValueError for an invalid value, so that a typo never reaches the node."""
    policy: dict[str, Any] = {}
    if gap is not None:
        if not valid_gap(gap):
            raise ValueError(f"--orphan-version-gap must be a number >= 1, got {gap!r}")
        policy[GAP_KEY] = int(gap) if float(gap).is_integer() else gap
    if grace_ms is not None:
        if not valid_grace(grace_ms):
            raise ValueError(f"--manifest-grace-ms must be an integer >= 0, got {grace_ms!r}")
        policy[GRACE_KEY] = grace_ms
    if auto_tombstone is not None:
        if auto_tombstone not in AUTO_CHOICES:
            raise ValueError(f"--auto-tombstone must be one of {', '.join(AUTO_CHOICES)}, "
                             f"got {auto_tombstone!r}")
        policy[AUTO_KEY] = None if auto_tombstone == AUTO_INHERIT else auto_tombstone
    if gc_max_age_ms is not None:  # retention's own override (`core.reconcile.rules.retention`)
        if not valid_max_age(gc_max_age_ms):
            raise ValueError(f"--gc-max-age-ms must be a number > 0, got {gc_max_age_ms!r}")
        policy[POLICY_MAX_AGE] = (int(gc_max_age_ms) if float(gc_max_age_ms).is_integer()
                                  else gc_max_age_ms)
    if gc_max_count is not None:
        if not valid_max_count(gc_max_count):
            raise ValueError(f"--gc-max-count must be an integer >= 0, got {gc_max_count!r}")
        policy[POLICY_MAX_COUNT] = gc_max_count
    return {POLICY_PROPERTY: policy}
