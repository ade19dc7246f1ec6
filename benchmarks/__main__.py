"""`python -m benchmarks [--smoke] [--repeats N] [--only drain,...] [--scale quick|full]`: every
benchmark.

Prints one table per benchmark and the targets met or missed on stdout, then exactly one JSON
object (the last line) with every figure. Progress goes to stderr. Full sizes take several
minutes (seeding 100,000 chunks alone takes about half a minute); the scale section's
1,000,000-chunk rows run only with `--scale full` (see README "Performance" for how long each
part takes); the PostgreSQL rows run on `$KB_BENCH_PG_URL` or a throwaway cluster
(`benchmarks.postgres_bench`); `--smoke` runs tiny sizes in seconds and is what the test
suite runs. The machine is shared, so timings are noisy: compare runs, and prefer
`--repeats 2` or more (each contender's best run is reported).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks import (
    drain_bench,
    drain_neo_bench,
    drain_server_bench,
    idle_bench,
    legacy_bench,
    postgres_bench,
    reconcile_bench,
    scale_bench,
    startup_bench,
)
from benchmarks.harness import Target, emit_report, machine, progress

BENCHMARKS = ("drain", "drain-server", "drain-neo", "postgres", "reconcile", "legacy", "scale",
              "idle", "startup")


def run_all(*, smoke: bool, repeats: int, only: Sequence[str],
            scale: str = "quick") -> tuple[list[str], dict[str, Any]]:
    """Run the chosen benchmarks; return their printed sections and the combined report."""
    report: dict[str, Any] = {"mode": "smoke" if smoke else "full", "repeats": repeats,
                              "scaleShapes": "smoke" if smoke else scale,
                              "machine": machine()}
    sections: list[str] = []
    runners: dict[str, tuple[Callable[[], dict[str, Any]], Callable[[dict[str, Any]], str]]] = {
        "drain": (lambda: drain_bench.run_drain_benchmark(
            drain_bench.SMOKE_SIZES if smoke else drain_bench.FULL_SIZES, repeats=repeats),
            drain_bench.table),
        "drain-server": (lambda: drain_server_bench.run_server_benchmark(
            drain_bench.SMOKE_SIZES if smoke else drain_bench.FULL_SIZES, repeats=repeats),
            drain_server_bench.table),
        "drain-neo": (lambda: drain_neo_bench.run_neo_benchmark(
            drain_bench.SMOKE_SIZES if smoke else drain_bench.FULL_SIZES, repeats=repeats),
            drain_neo_bench.table),
        "postgres": (lambda: postgres_bench.run_benchmark(smoke=smoke, repeats=repeats),
                     postgres_bench.table),
        "scale": (lambda: scale_bench.run_scale_benchmark(
            scale_bench.SCALES["smoke" if smoke else scale], repeats=repeats),
            scale_bench.table),
        "reconcile": (lambda: reconcile_bench.run_reconcile_benchmark(
            reconcile_bench.SMOKE_SIZES if smoke else reconcile_bench.FULL_SIZES,
            repeats=repeats), reconcile_bench.table),
        "legacy": (lambda: legacy_bench.run_legacy_benchmark(
            legacy_bench.SMOKE_CHUNKS if smoke else legacy_bench.FULL_CHUNKS, repeats=repeats),
            legacy_bench.table),
        "idle": (lambda: idle_bench.run_idle_benchmark(
            idle_bench.SMOKE_WINDOW_S if smoke else idle_bench.FULL_WINDOW_S),
            idle_bench.table),
        "startup": (lambda: startup_bench.run_startup_benchmark(
            startup_bench.SMOKE_RUNS if smoke else startup_bench.FULL_RUNS),
            startup_bench.table),
    }
    started = time.monotonic()
    for name in BENCHMARKS:
        if name not in only:
            continue
        run, render = runners[name]
        progress(f"{name}: starting")
        result = run()
        report[name] = result
        sections.append(render(result))
    targets = [t for name in BENCHMARKS if name in report for t in report[name]["targets"]]
    report["targets"] = targets
    report["targetsMet"] = all(t["met"] for t in targets)
    report["consistent"] = all(report[name].get("consistent", True)
                               for name in BENCHMARKS if name in report)
    report["durationS"] = round(time.monotonic() - started, 1)
    sections.append(summary(targets, smoke=smoke))
    return sections, report


def summary(targets: Sequence[dict[str, Any]], *, smoke: bool) -> str:
    """One line per target, met or MISSED."""
    lines = [Target(t["name"], t["value"], t["limit"], t["kind"], t["unit"]).line()
             for t in targets]
    note = " (smoke sizes: the verdicts mean nothing, only that every benchmark ran)"
    return "Targets" + (note if smoke else "") + "\n" + "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run, print the tables, then the one JSON object. Exit 0 even when a target is missed
    (the figures are the result); a benchmark that could not run raises (exit 1)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (seconds)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs per contender; the best is reported (default 1)")
    parser.add_argument("--only", default=",".join(BENCHMARKS),
                        help=f"comma-separated subset of {', '.join(BENCHMARKS)}")
    parser.add_argument("--scale", choices=("quick", "full"), default="quick",
                        help="the scale section's shapes: quick (100,000 chunks in all) or "
                        "full (adds 1,000,000 chunks for 1 and 10,000 tenants)")
    args = parser.parse_args(argv)
    only = [b for b in args.only.split(",") if b]
    if not only or set(only) - set(BENCHMARKS):
        parser.error(f"--only: choose from {', '.join(BENCHMARKS)}")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    sections, report = run_all(smoke=args.smoke, repeats=args.repeats, only=only,
                               scale=args.scale)
    print("\n\n".join(sections), flush=True)
    emit_report(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
