"""What the admin commands (`kb-enqueue`, `kb-tenants`) say to a person when not `--json`, and
`counted`, the count with its noun that every summary uses (pure: figures in, text out; the
house rules for these lines are in `daemons.cli.summaries`).

Apart from `daemons.cli.summaries` because that module imports every wing's tick, which these
commands never run: they stay quick to start (README "Performance").
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from core.base.reports.tables import as_text, table
from core.base.rules.tenants import TenantConfig


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """`1 session`, `2 sessions`, `0 summaries` (pass `plural` where adding an s is wrong)."""
    return f"{number:,} {noun if number == 1 else (plural or noun + 's')}"


def enqueue_summary(appended: int, queue: Path) -> str:
    """`kb-enqueue`: how many lines went where, and when they are linked."""
    if not appended:
        return "nothing appended: stdin held no edge lines\n"
    return (f"appended {counted(appended, 'edge line')} to {queue}; the drain daemon links "
            f"{'it' if appended == 1 else 'them'} on its next tick (kb-drain --tick to do it "
            "now)\n")


def set_config_summary(tenant_id: str, version: int, repo_slug: str | None) -> str:
    """`kb-tenants set-config`: the new version and what it means."""
    repo = f" (repo {repo_slug})" if repo_slug else ""
    return (f"tenant {tenant_id}{repo}: config version {version}; chunks stamped with an "
            "older version are now stale\nkb-reconcile --tick --dry-run lists them\n")


def tenants_listing(tenants: Sequence[TenantConfig]) -> str:
    """`kb-tenants list`: a table of the configured tenants, or how to add the first."""
    if not tenants:
        return ("no tenants configured yet; add one with "
                "kb-tenants set-config TENANT --repo-slug R\n")
    return as_text(f"{counted(len(tenants), 'tenant')} configured:",
                   table(None, ["tenant", "config version", "repo"],
                         [[t.tenant_id, t.version, t.repo_slug] for t in tenants],
                         numeric=["config version"]))
