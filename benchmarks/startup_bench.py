"""Start-up benchmark: what a command costs as a whole process, against a bare interpreter.

    python -m benchmarks.startup_bench [--smoke]

Seeds a small embedded store (tenant `acme` at version 4 and four of its chunks, in a child:
`--seed`), then times whole processes from spawn to exit, as an operator's shell sees them:
`python -c pass`, `kb-status`, `kb-status --health`, `kb-tenants show acme` (each as
`python -m daemons.<command> --config <temp>/kb.toml`) and `kb-reconcile explain acme`, the one
of them that opens Chroma.

The children keep their bytecode in a cache inside the benchmark's temp folder
(`PYTHONPYCACHEPREFIX`, even where `PYTHONDONTWRITEBYTECODE` is set), as an installed command
runs from the bytecode its install or its first run wrote; every command runs once untimed to
fill it, so no figure includes compiling. Then the commands take turns, one run of each per
round, so that a change in the machine's load touches every command alike; each command's
median is reported with its difference from the bare interpreter's. Issue 34's target:
status, tenants and health within 0.3 s of `python -c pass` on a quiet machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    STDERR_TAIL_CHARS,
    BenchmarkError,
    Target,
    child_env,
    emit_report,
    format_table,
    make_workdir,
    progress,
    remove_tree,
    repo_root,
    run_child,
)

MODULE = "benchmarks.startup_bench"
#: Timed runs of each command (after its untimed one): the median of five is steady enough
#: on a shared machine; the smoke run only shows that every command runs.
FULL_RUNS = 5
SMOKE_RUNS = 1
#: Issue 34's target for the commands that never open Chroma, in seconds over the bare
#: interpreter.
MAX_OVER_BARE_S = 0.3
#: The tenant the seeded store holds (tests.support.seed_acme_drift).
TENANT = "acme"
#: The longest one command may take (explain imports chromadb: seconds on a busy machine).
COMMAND_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class Command:
    """One timed command: its name in the report and its words after `python`."""

    name: str
    words: tuple[str, ...]
    #: Whether the start-up target applies to it (it never opens Chroma).
    targeted: bool = False

    def shown(self) -> str:
        """The command line as the table shows it (the config is always the temp one)."""
        return " ".join(("python", *self.words)).replace(" --config CONFIG", "")


def commands() -> tuple[Command, ...]:
    """The commands, the bare interpreter first (`CONFIG` stands for the temp config)."""
    config = ("--config", "CONFIG")
    return (
        Command("bare", ("-c", "pass")),
        Command("status", ("-m", "daemons.status", *config), targeted=True),
        Command("health", ("-m", "daemons.status", *config, "--health"), targeted=True),
        Command("tenants-show", ("-m", "daemons.tenants", *config, "show", TENANT),
                targeted=True),
        Command("explain", ("-m", "daemons.reconcile", *config, "explain", TENANT)),
    )


def startup_env(workdir: Path) -> dict[str, str]:
    """The children's environment (`harness.child_env`) with their bytecode cached under
    `workdir`: without a cache every start compiles the project's modules again (~0.1 s of
    the status command's time here), which no installed command pays."""
    env = child_env(workdir)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
    return env


def write_config(path: Path) -> None:
    """A config with its store in `data/` beside it."""
    path.write_text('[knowledgeBase]\ndataDir = "data"\n', encoding="utf-8")


@dataclass(frozen=True, slots=True)
class Run:
    """One run of a command: its wall time from spawn to exit, and the CPU time (user +
    system) it used, which a busy machine inflates far less than the wall time."""

    wall_s: float
    cpu_s: float


def children_cpu_s() -> float:
    """User + system CPU time of this process's waited-for children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(command: Command, *, config: Path, env: Mapping[str, str]) -> Run:
    """Run one command to its end and time it. A command that fails raises BenchmarkError
    quoting its stderr (its time would mean nothing)."""
    words = [str(config) if word == "CONFIG" else word for word in command.words]
    cpu_before = children_cpu_s()
    started = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, *words], env=dict(env), cwd=repo_root(),
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, timeout=COMMAND_TIMEOUT_S,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        raise BenchmarkError(f"{command.shown()} ran over {COMMAND_TIMEOUT_S:.0f} s") from exc
    wall_s = time.perf_counter() - started
    if done.returncode != 0:
        raise BenchmarkError(f"{command.shown()} exited {done.returncode}; stderr:\n"
                             f"{done.stderr[-STDERR_TAIL_CHARS:]}")
    return Run(wall_s, children_cpu_s() - cpu_before)


def time_commands(timed: Sequence[Command], *, runs: int, config: Path,
                  env: Mapping[str, str]) -> dict[str, list[Run]]:
    """One untimed run of each command, then `runs` rounds of one timed run each."""
    for command in timed:
        run_once(command, config=config, env=env)
    timings: dict[str, list[Run]] = {command.name: [] for command in timed}
    for round_number in range(runs):
        progress(f"startup: round {round_number + 1} of {runs}")
        for command in timed:
            timings[command.name].append(run_once(command, config=config, env=env))
    return timings


def figures(timed: Sequence[Command], runs: Mapping[str, list[Run]]) -> dict[str, Any]:
    """Each command's median wall time, best and runs, its median over the bare interpreter's
    and its median CPU time; the target on the slowest of the targeted commands (wall)."""
    bare_s = statistics.median(run.wall_s for run in runs["bare"])
    rows: dict[str, Any] = {}
    for command in timed:
        walls = [run.wall_s for run in runs[command.name]]
        median_s = statistics.median(walls)
        rows[command.name] = {
            "command": command.shown(),
            "medianS": round(median_s, 3),
            "minS": round(min(walls), 3),
            "runsS": [round(wall, 3) for wall in walls],
            "overBareS": round(median_s - bare_s, 3),
            "cpuMedianS": round(statistics.median(run.cpu_s for run in runs[command.name]), 3),
            "targeted": command.targeted,
        }
    worst = max(rows[command.name]["overBareS"] for command in timed if command.targeted)
    target = Target(f"start-up: status/tenants/health within {MAX_OVER_BARE_S} s of "
                    "python -c pass", worst, MAX_OVER_BARE_S, unit=" s")
    return {"commands": rows, "bareS": round(bare_s, 3), "targets": [target.as_dict()]}


def run_startup_benchmark(runs: int) -> dict[str, Any]:
    """Seed the store, time every command `runs` times, and report."""
    workdir = make_workdir("startup")
    try:
        env = startup_env(workdir)
        config = workdir / "kb.toml"
        write_config(config)
        progress("startup: seeding a small store")
        run_child(MODULE, ["--seed", str(config)], env=env)
        timed = commands()
        load_before = os.getloadavg()[0]
        timings = time_commands(timed, runs=runs, config=config, env=env)
        return {"runs": runs, "loadAverage1mBefore": round(load_before, 2),
                "loadAverage1mAfter": round(os.getloadavg()[0], 2),
                **figures(timed, timings)}
    finally:
        remove_tree(workdir)


def table(result: dict[str, Any]) -> str:
    """The start-up section of the printed table."""
    body = format_table(
        ["command", "median s", "best s", "over bare s", "CPU s"],
        [[row["command"], row["medianS"], row["minS"], row["overBareS"], row["cpuMedianS"]]
         for row in result["commands"].values()],
    )
    return (f"Start-up: whole process, median of {result['runs']} (load average "
            f"{result['loadAverage1mBefore']} -> {result['loadAverage1mAfter']}; target: "
            f"status, tenants, health within {MAX_OVER_BARE_S} s of python -c pass)\n{body}")


def seed_store(config: Path) -> dict[str, Any]:
    """The child's work for `--seed`: tenant `acme` and four of its chunks in the config's
    embedded store (the parent never imports chromadb)."""
    from core.base.runtime.config_file import load_config
    from tests.support import seed_acme_drift

    asyncio.run(seed_acme_drift(load_config(str(config)).settings))
    return {"seeded": str(config)}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the start-up benchmark and print its table and JSON object (or, with `--seed`,
    seed a store as its child)."""
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help=f"{SMOKE_RUNS} timed run each")
    parser.add_argument("--seed", metavar="CONFIG", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.seed is not None:
        emit_report(seed_store(args.seed))
        return 0
    result = run_startup_benchmark(SMOKE_RUNS if args.smoke else FULL_RUNS)
    print(table(result))
    emit_report(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
