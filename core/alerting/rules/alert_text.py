"""Alert wording, pure: an alert's subject line and Markdown body, with figures written as a
person writes them."""

from __future__ import annotations

from core.alerting.rules.alert_evaluation import Alert


def format_number(value: float) -> str:
    """A figure as a person writes it (and JavaScript prints it): `3`, not `3.0`; `0.25`."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def alert_subject(alert: Alert) -> str:
    """`[alert] warning: reconcileEvents 3 over threshold 0 (tenant t1)`; a repo-scope alert
    names its repo too, or two repos' alerts would read the same."""
    where = f"tenant {alert.tenant_id}"
    if alert.scope == "repo":
        where += f", repo {alert.repo_slug}"
    return (
        f"[alert] {alert.severity}: {alert.metric} {format_number(alert.value)} "
        f"over threshold {format_number(alert.threshold)} ({where})"
    )


def alert_body(alert: Alert) -> str:
    """The alert's Markdown body (what chat relays render)."""
    return "\n".join([
        f"KB ingestion alert — **{alert.severity}**",
        "",
        f"- Tenant: `{alert.tenant_id}`",
        f"- Repo: `{alert.repo_slug}`",
        f"- Metric: `{alert.metric}`",
        f"- Observed: {format_number(alert.value)} (threshold {format_number(alert.threshold)})",
        "",
        "Per-tenant KB ingestion telemetry crossed an operator-configured threshold.",
    ])
