"""`python -m daemons.demo [--config F]`: seed a small realistic dataset, run one drain tick and
one reconcile pass on it, and print the status.

The newcomer sees sessions live-ingested, missing nodes back-filled, hallucinated edges
re-queued, malformed lines dead-lettered, and a tenant whose chunks drifted behind its config.
The reconcile pass is report-only (auto-tombstoning forced off), not a dry run, so it writes
the telemetry `status` shows and deletes nothing.

The demo writes over nothing it did not write: it starts again only in a data folder that is
fresh or as its last run left it (`core.suite.demo.folder`), and only into a store that holds
nothing but its own rows; anything else is exit 2, one line, nothing changed.

`--neo [DIR]` tells the same story on a made-up neo.mjs checkout in a folder of the demo's own
(default `.kb-neo-demo`; `core.suite.demo.neo`), judged the same way.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from core.base.chroma import CollectionMissing
from core.base.io.clock import now_ms
from core.base.rules.camel_json import Figures, to_json
from core.base.rules.errors import ConfigError
from core.base.rules.rows import ChromaRow
from core.base.runtime.context import TickContext
from core.base.runtime.settings import load_settings
from core.drain.rem_tick import RemTickFigures
from core.drain.rules.drain_plan import DrainStats
from core.drain.rules.ingest import LiveIngestFigures
from core.reconcile.rules.reconcile_outcome import ReconcileFigures
from core.suite.demo import folder as demo_state
from core.suite.demo.dataset import TENANTS, DemoDataset, Seeded, build_demo_dataset, seed_demo
from core.suite.demo.neo import CONFIG, NEO_DEMO_FOLDER, claim_neo_demo, seed_platform
from core.suite.demo.neo_folder import MARKER
from core.suite.oneshot import one_shot, run_job
from core.suite.status import gather_status
from core.suite.status_text import render_status_text
from daemons.cli.commands import (
    Parser,
    add_config_flag,
    command_name,
    emit_json,
    run_main,
    write_text,
)
from daemons.cli.serving import exit_code
from daemons.cli.summaries_admin import counted
from daemons.drain import drain_spec
from daemons.reconcile import reconcile_daemon

PROG = "daemons.demo"
SCRIPT = "kb-demo"


def build_parser() -> Parser:
    """Flags of the demo."""
    parser = Parser(prog=SCRIPT,
                    description="Seed a small demo dataset into the configured store (default: "
                    "the embedded store under .kb-data), run one drain tick and one report-only "
                    "reconcile pass, and print the status. Each run tells the same story.")
    add_config_flag(parser)
    parser.add_argument("--json", action="store_true",
                        help="print exactly one JSON object (what was seeded, the drain tick's "
                        "and the pass's figures, the status) instead of the story")
    parser.add_argument("--neo", nargs="?", const=NEO_DEMO_FOLDER, metavar="DIR",
                        help="the same story on the original's own graph: a made-up neo.mjs "
                        f"checkout in DIR (default {NEO_DEMO_FOLDER}), a folder of the demo's "
                        "own, rebuilt on every run that finds it as the last one left it "
                        "(not with --config)")
    return parser


async def refuse_foreign_store(context: TickContext, dataset: DemoDataset) -> None:
    """Raise ConfigError when a collection holds more rows than the demo writes into it: that
    store has real data, and the demo's made-up sessions must not be mixed into it."""
    settings = context.settings
    expected: dict[str, Sequence[ChromaRow]] = {
        settings.chroma.memory_collection: dataset.memories,
        settings.chroma.summary_collection: dataset.summaries,
        settings.chroma.knowledge_base_collection: dataset.chunks,
    }
    for name, rows in expected.items():
        try:
            count = await context.vectors.count(name)
        except CollectionMissing:
            continue
        if count > len(rows):
            raise ConfigError(
                f"{context.vectors.description_of(name)}: collection {name!r} holds "
                f"{count} rows, more than the demo writes; refusing to seed demo data into "
                "a store with real data (point --config at a fresh dataDir)")


def report_only(context: TickContext) -> TickContext:
    """The context with reconciliation on for this pass and tombstoning off (see module doc)."""
    reconcile = dataclasses.replace(context.settings.reconcile, enabled=True,
                                    auto_tombstone=False)
    settings = dataclasses.replace(context.settings, reconcile=reconcile)
    return dataclasses.replace(context, settings=settings)


async def run_demo(config: str | None, *, as_json: bool = False,
                   neo: str | None = None) -> int:
    """Seed, tick, reconcile, show: the drain tick and the reconcile pass are the daemons'
    own jobs, run once through the runtime's one-shot path (its bound, its graceful stop).
    With `neo`, on a made-up neo.mjs checkout in that folder (see the module docstring).
    A folder that is not the demo's own is refused before anything is written."""
    started = time.monotonic()
    if neo is not None:
        config = str(await prepare_neo_demo(Path(neo)))
    settings = load_settings(config)
    if neo is None:
        refusal = await demo_state.claim_folder(settings)
        if refusal is not None:
            raise ConfigError(not_own(settings.data_dir, refusal, instead="--config <a config "
                                      "whose dataDir is a new folder>"))
    dataset = build_demo_dataset(now_ms=now_ms())
    drained: Figures | None = None
    reconciled: Figures | None = None
    async with one_shot(settings) as (context, run):
        await refuse_foreign_store(context, dataset)
        seeded = await seed_demo(context, dataset)
        if not run.control.stopping:
            drained = (await run_job(context, drain_spec(settings).jobs[0],
                                     dry_run=False)).figures
        if not run.control.stopping:
            reporting = report_only(context)
            reconciled = (await run_job(reporting, reconcile_daemon(reporting.settings).jobs[0],
                                        dry_run=False)).figures
    # Even after a stop signal: everything here is the demo's, so the next run may reset it.
    demo_state.remember(settings, await demo_state.measure(settings))
    status = await gather_status(settings)
    if as_json:
        emit_json({"ok": True, "fresh": True,
                   "seeded": to_json(seeded),
                   "drain": to_json(drained) if drained is not None else None,
                   "reconcile": to_json(reconciled) if reconciled is not None else None,
                   "status": to_json(status)})
        return exit_code(ok=True, run=run)
    write_text(render_story(seeded, drained=drained, reconciled=reconciled,
                            config=config,
                            again="make demo" if neo is None else "make demo-neo"))
    write_text("\nStatus now\n" + render_status_text(status, header=False))
    write_text(f"\ndemo finished in {time.monotonic() - started:.1f}s\n")
    return exit_code(ok=True, run=run)


def not_own(folder: Path, reason: str, *, instead: str) -> str:
    """The one line of a refusal: the folder, why it is not the demo's, where to run instead."""
    return (f"{folder} {reason}; the demo changes nothing there. Run it in a folder of its "
            f"own: {command_name(PROG)} {instead}")


async def prepare_neo_demo(folder: Path) -> Path:
    """The neo demo's folder claimed and its platform graph built; its config's path. A
    folder the demo made is rebuilt only when it is the demo's own as `claim_folder` judges
    it (its last run's footprint matches, no daemon uses it); else exit 2, nothing changed."""
    config = folder / CONFIG
    if config.is_file() and (folder / MARKER).is_file():
        try:
            earlier = load_settings(str(config))
        except ConfigError:  # an earlier run stopped before its graph: nothing to keep
            earlier = None
        if earlier is not None and demo_state.store_in_use(earlier):
            # Emptying it would pull the store from under them.
            raise ConfigError(not_own(folder, demo_state.NOT_OURS_IN_USE,
                                      instead="--neo <a new folder>"))
        if earlier is not None:
            refusal = await demo_state.claim_folder(earlier, reset=False)
            if refusal is not None:
                raise ConfigError(not_own(folder, refusal, instead="--neo <a new folder>"))
    path = await claim_neo_demo(folder)
    await seed_platform(load_settings(str(path)))
    return path


def render_story(seeded: Seeded, *, drained: Figures | None, reconciled: Figures | None,
                 config: str | None, again: str = "make demo") -> str:
    """What just happened, in the order it happened, with the figures that show it (a step a
    stop signal skipped shows zeros); each kind of tenant seeded with what the pass found in
    it; hints that hold in this folder."""
    live = drained.live_ingest if isinstance(drained, RemTickFigures) else None
    drain = drained.drain if isinstance(drained, RemTickFigures) else DrainStats()
    upserted = (live.sessions_upserted, live.memories_upserted) \
        if isinstance(live, LiveIngestFigures) else (0, 0)
    stale, tombstoned = (reconciled.stale_count, reconciled.tombstoned_count) \
        if isinstance(reconciled, ReconcileFigures) else (0, 0)
    flag = f" --config {config}" if config else ""
    lines = [
        "Demo",
        f"  seeded {seeded.memories} memories, {seeded.summaries} session summaries "
        f"(2 sessions have none), {seeded.chunks} knowledge-base chunks for "
        f"{len(seeded.tenant_versions)} tenants, "
        + (f"{seeded.queue_lines} queue lines" if seeded.queue_lines
           else "no queue lines (an earlier run appended them: a line appended again would "
                "be a new mention)"),
        f"  drain tick: live-ingested {counted(upserted[0], 'session')} and "
        f"{counted(upserted[1], 'memory', 'memories')}; drained "
        f"{counted(drain.total_lines, 'line')}: {drain.succeeded} linked (back-filling what "
        f"was missing), {drain.requeued} re-queued (hallucinated targets), "
        f"{drain.dead_lettered} dead-lettered (malformed)",
        f"  reconcile pass (report-only): {counted(stale, 'stale chunk')} found, "
        f"{tombstoned} tombstoned",
        *_tenant_lines(reconciled),
        "",
        "Try next:",
        f"  .venv/bin/kb-status{flag}                       # this table again (--json for tools)",
        f"  .venv/bin/kb-reconcile --tick --dry-run{flag}   # what reconciliation would do",
        f"  .venv/bin/kb-reconcile explain {FORCE_PUSHED}{flag}  # one tenant's plan, chunk "
        "by chunk",
        f"  .venv/bin/kb-backfill --days 30 --dry-run{flag} # an eager back-fill, counted",
        f"  {again:<42} # again: the same story from the start",
    ]
    return "\n".join(lines) + "\n"


#: The tenant the summary points at for a closer look: the one with the most to explain.
FORCE_PUSHED = next(t.tenant_id for t in TENANTS if t.kind == "force-pushed")


def _tenant_lines(reconciled: Figures | None) -> list[str]:
    """One line per kind of tenant the demo seeds, with what the pass found in it."""
    found = {t.tenant_id: t for t in reconciled.tenants} \
        if isinstance(reconciled, ReconcileFigures) else {}
    lines = ["  tenants:"]
    for tenant in TENANTS:
        figures = found.get(tenant.tenant_id)
        if figures is None:
            seen = "not reconciled in this run"
        else:
            seen = (f"{counted(figures.stale_count, 'config-stale chunk')}, "
                    f"{counted(figures.manifest_orphan_count, 'manifest orphan')}, "
                    f"{counted(figures.missing_path_count, 'missing path')}")
        lines.append(f"    {tenant.tenant_id:<8} {tenant.kind:<16} {seen}")
    return lines


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.neo is not None and args.config is not None:
        parser.error("--neo: not with --config (the neo demo writes its own config)")
    run_main(PROG, lambda: run_demo(args.config, as_json=args.json, neo=args.neo))


if __name__ == "__main__":
    main()
