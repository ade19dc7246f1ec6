"""`reconcile explain TENANT` on a terminal (pure: a `TenantPlan` in, text out): the policy in
force, the counts, the guard that would hold the pass and its numbers, the manifests with their
missing paths, and a table of the first `PAGE_ROWS` chunks with the totals (`--json` lists
every chunk).
"""

from __future__ import annotations

import math
from typing import Any, Final

from core.base.reports.tables import as_text, table
from core.base.rules.timestamps import iso_from_ms
from core.reconcile.rules.explain_plan import ChunkLine, GenerationLine, GuardCheck, TenantPlan

#: Chunks and missing paths shown on a terminal; `--json` has them all.
PAGE_ROWS: Final = 50


def _closed(value: float | None, unit: str = "") -> str:
    if value is None:
        return "invalid: nothing actionable (fails closed)"
    return f"{int(value):,}{unit}" if float(value).is_integer() else f"{value:g}{unit}"


def _why(chunk: ChunkLine) -> str:
    parts = []
    if "config-stale" in chunk.reasons:
        parts.append(f"config-stale ({chunk.version_gap:g} behind)")
    if "manifest-orphan" in chunk.reasons:
        parts.append("manifest-orphan")
    return " + ".join(parts)


def _action(chunk: ChunkLine) -> str:
    if chunk.restore_held:
        return "held (restored)"
    if chunk.held:
        return "held (no usable ingestedAt)"
    if chunk.would_delete:
        return "delete this pass"
    return "actionable" if chunk.actionable else "report only"


def _guards(guards: GuardCheck) -> list[str]:
    # An incomplete count stopped once the stale-fraction guard could no longer trip.
    share = (f"{guards.actionable_count:,} of {guards.total_chunks:,} chunks"
             if guards.total_chunks is not None and guards.total_complete else
             f"{guards.actionable_count:,} of at least {guards.total_chunks:,} chunks (counted "
             "until the stale-fraction guard could no longer hold the pass)"
             if guards.total_chunks is not None else f"{guards.actionable_count:,} chunks")
    out = [f"  guard: {guards.guard or 'none would hold the pass'}  (actionable {share}; "
           f"max stale fraction {guards.max_stale_fraction:g}; "
           f"max deletes per pass {guards.max_deletes_per_tick:,})"]
    if guards.invalid_guards:
        out.append(f"  invalid settings (fail closed): {', '.join(guards.invalid_guards)}")
    if guards.why_not:
        out.append(f"  a pass would delete nothing: {guards.why_not}")
    else:
        over = f"; {guards.over_cap:,} past the cap wait for later passes" \
            if guards.over_cap else ""
        out.append(f"  a pass would archive, then delete {guards.would_delete:,} chunks{over}")
    return out


def _restore_holds(plan: TenantPlan) -> list[str]:
    holds = plan.restore_holds
    if holds is None:
        return []
    return [f"  restore holds: {holds.chunk_count:,} chunks put back from "
            f"{', '.join(holds.archives)} are held: no pass deletes them until the version "
            f"is raised again or a manifest or yield snapshot is replaced; {holds.release} "
            "lifts the hold"]


def _retention(plan: TenantPlan) -> list[str]:
    r = plan.retention
    if r is None or (r.retention["maxAgeMs"] is None and r.retention["maxCount"] is None):
        return ["  retention: no rule in force (gcRetention, set-policy --gc-max-*)"]
    rules = ", ".join(f"{k} {v:,}" for k, v in r.retention.items() if v is not None)
    repos = "; ".join(f"{x.repo_slug or '-'} {x.expired_count:,}" for x in r.repos)
    return [f"  retention ({rules}): {r.expired_count:,} of {r.evaluated_count:,} chunks "
            f"expired{' (' + repos + ')' if repos else ''}; gc deletes them only with "
            "gcAutoDelete (--json lists their ids)"]


def _manifests(plan: TenantPlan) -> list[str]:
    if not plan.manifests:
        return ["", "Manifests: none (only config staleness is checked)"]
    out = ["", "Manifests"]
    for m in plan.manifests:
        grace = "past its grace" if m.past_grace else "within its grace: orphans not actionable yet"
        revision = f", revision {m.revision[:12]}" if m.revision else ""
        out.append(f"  {m.repo_slug}: {m.path_count:,} paths{revision}, {grace}; "
                   f"{len(m.missing_paths):,} missing (re-ingestion candidates); orphans "
                   f"{m.orphan_count:,} of its {m.chunk_count:,} chunks")
        if m.mismatch:
            out.append(f"    held (manifest-mismatch): it would orphan more than "
                       f"{plan.guards.max_stale_fraction:g} of the repo's chunks; check the "
                       "folder or list it was made from and set it again")
        out.extend(f"    missing: {path}" for path in m.missing_paths[:PAGE_ROWS])
        if len(m.missing_paths) > PAGE_ROWS:
            out.append(f"    ... and {len(m.missing_paths) - PAGE_ROWS:,} more (--json)")
    return out


def _malformed(plan: TenantPlan) -> list[str]:
    if not plan.malformed:
        return []
    out = ["", f"Malformed chunks ({len(plan.malformed):,}): fields of unexpected types, each "
           "read as absent"]
    for chunk in plan.malformed[:PAGE_ROWS]:
        fields = ", ".join(f"{name}={value!r}" for name, value in zip(chunk.fields,
                                                                        chunk.values,
                                                                        strict=True))
        out.append(f"  {chunk.id}: {fields}")
    if len(plan.malformed) > PAGE_ROWS:
        out.append(f"  ... and {len(plan.malformed) - PAGE_ROWS:,} more (--json)")
    return out


def _generations(plan: TenantPlan) -> list[Any]:
    """The generation orphans, and what this pass would do with each."""
    if not plan.generation_orphans:
        return []
    rows = [[g.id, g.repo_slug, g.source_path, g.kind, "/".join(g.stamp), "/".join(g.declared),
             g.tier, g.why, _generation_action(g)] for g in plan.generation_orphans[:PAGE_ROWS]]
    out: list[Any] = ["", table(f"Generation orphans ({len(plan.generation_orphans):,})",
                                ["id", "repo", "path", "kind", "stamp", "declared", "tier",
                                 "why", "action"], rows)]
    if len(plan.generation_orphans) > PAGE_ROWS:
        out.append(f"  ... and {len(plan.generation_orphans) - PAGE_ROWS:,} more (--json)")
    return out


def _generation_action(line: GenerationLine) -> str:
    if line.restore_held:
        return "held (restored)"
    if line.would_delete:
        return "delete this pass"
    return "actionable" if line.actionable else "waits"


def ingested_text(value: Any) -> Any:
    """A chunk's `ingestedAt` as a person reads it: epoch ms as ISO-8601 UTC; a string (older
    chunks carry ISO text), a missing value or one of an unexpected type as it is (`--json`
    keeps the raw value either way)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        try:
            return iso_from_ms(int(value))
        except (OverflowError, ValueError, OSError):  # beyond the calendar: shown raw
            return value
    return value


def render_plan(plan: TenantPlan) -> str:
    """The plan as text for a terminal."""
    f = plan.figures
    out: list[Any] = [
        f"Plan for tenant {plan.tenant_id} (version {plan.current_version}, repo "
        f"{plan.repo_slug or '-'}): nothing was changed",
        f"  policy: orphanVersionGap {_closed(plan.orphan_version_gap)}, manifestGraceMs "
        f"{_closed(plan.manifest_grace_ms, ' ms')}, autoTombstone "
        f"{'on' if plan.auto_tombstone else 'off'}",
        f"  scanned {f.scanned:,}; config-stale {f.stale_count:,}; manifest orphans "
        f"{f.manifest_orphan_count:,}; total (each chunk once) {f.total_orphan_count:,}; "
        f"actionable {f.actionable_count:,}; held {f.held_count:,}"
        f"{f'; held by a restore {f.restore_held_count:,}' if f.restore_held_count else ''}"
        f"; missing paths "
        f"{f.missing_path_count:,}; malformed {f.malformed_count:,}"]
    out += _guards(plan.guards)
    out += _restore_holds(plan)
    out += _retention(plan)
    out += _manifests(plan)
    out += _malformed(plan)
    out += _generations(plan)
    out.append("")
    if not plan.chunks:
        out.append("Chunks: none stale or orphaned")
        return as_text(*out)
    out.append(table(f"Chunks ({len(plan.chunks):,})",
                     ["id", "repo", "path", "stamp", "ingestedAt", "why", "action"],
                     [[c.id, c.repo_slug, c.source_path, c.stamp, ingested_text(c.ingested_at),
                       _why(c), _action(c)] for c in plan.chunks[:PAGE_ROWS]]))
    if len(plan.chunks) > PAGE_ROWS:
        out.append(f"  ... {len(plan.chunks) - PAGE_ROWS:,} more of {len(plan.chunks):,} "
                   "(--json lists every chunk)")
    return as_text(*out)
