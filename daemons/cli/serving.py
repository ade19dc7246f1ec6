"""What the daemon commands share beyond `daemons.cli.commands`: a daemon's `--tick` (its jobs
once, as its scheduler runs them), the exit code of a one-shot run, and the daemon-mode entry
point.

Apart from `daemons.cli.commands` because these load every wing's tick, which the commands
that run no daemon job (`kb-status`, `kb-tenants`, `kb-enqueue`) never need: their start-up
stays quick (README "Performance").
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import NoReturn

from core.base.config.config import Settings
from core.base.rules.camel_json import Figures
from core.base.runtime.logs import quiet_on_terminal
from core.base.runtime.settings import load_settings
from core.suite.oneshot import OneShot, run_jobs_once
from core.suite.scheduler import DaemonSpec, RuntimeOptions
from core.suite.serve import serve
from daemons.cli.commands import EXIT_FAILED, EXIT_OK, emit_json, run_main, write_text


async def tick_once(
    daemon: DaemonSpec,
    settings: Settings,
    *,
    dry_run: bool,
    as_json: bool,
    summarize: Callable[[Mapping[str, Figures]], str],
    succeeded: Callable[[Figures], bool] = lambda _figures: True,
) -> int:
    """A daemon's `--tick`: each of its jobs once, as its scheduler runs them, printed as one
    JSON object with `--json` (the first job's figures, each other job's under its name),
    else as `summarize`'s lines. Exit 0 when `succeeded` says the run did its work, else 1;
    a failure propagates to `run_main`."""
    done = await run_jobs_once(settings, daemon.jobs, dry_run=dry_run,
                               elected=daemon.name if daemon.elected else None)
    main = done.figures[daemon.jobs[0].name]
    shown = main.json()
    for job in daemon.jobs[1:]:
        if job.name in done.figures:
            shown[job.name] = done.figures[job.name].json()
    ok = succeeded(main.figures)
    if as_json:
        emit_json({"ok": ok, **shown})
    else:
        write_text(summarize({name: result.figures for name, result in done.figures.items()}))
        sys.stdout.flush()
    return exit_code(ok=ok, run=done.run)


def exit_code(*, ok: bool, run: OneShot) -> int:
    """CONTRACT's code for a one-shot run: stopped by a signal (128 + its number), else 0 or 1."""
    stopped = run.stopped_exit_code
    if stopped is not None:
        return stopped
    return EXIT_OK if ok else EXIT_FAILED


def serve_main(
    prog: str,
    *,
    config: str | None,
    build_specs: Callable[[Settings], Sequence[DaemonSpec]],
    dry_run: bool = False,
    metrics_port: Callable[[Settings], tuple[str, int]] | None = None,
) -> NoReturn:
    """The daemon-mode entry point of a `daemons.*` module: load the config, serve, exit.
    `metrics_port` picks a daemon's own metrics key and port (None: `metricsPort`)."""

    async def main() -> int:
        quiet_on_terminal(verbose=True)  # a daemon's log is its record, on a terminal too
        settings = load_settings(config)
        return await serve(settings, build_specs(settings),
                           options=RuntimeOptions(dry_run=dry_run),
                           metrics_port=None if metrics_port is None else metrics_port(settings))

    run_main(prog, main)
