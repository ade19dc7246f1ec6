"""Idle benchmark: what a daemon costs between ticks.

    python -m benchmarks.idle_bench [--smoke]

Starts `python -m daemons` (both daemons in one process; `python -m daemons.drain` while that
entry point does not exist) on a small seeded store with a config in a temp folder and
intervals of a day, waits until every job's first tick has finished, then reads the process's
CPU time (utime + stime of all its threads, from /proc/<pid>/stat) across a window of 60 s
(smoke: 3 s) and reports it as a percentage of one core. The daemon is then stopped with
SIGTERM, as systemd would, and must exit 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from benchmarks import drain_bench
from benchmarks.harness import (
    BenchmarkError,
    Target,
    child_env,
    emit_report,
    format_table,
    make_workdir,
    progress,
    remove_tree,
    run_child,
)

FULL_WINDOW_S = 60.0
SMOKE_WINDOW_S = 3.0
#: Tick intervals: a day, so no second tick can fall inside the window.
IDLE_INTERVAL_MS = 86_400_000
#: How long the first ticks may take (they drain the small seeded queue, then reconcile).
FIRST_TICKS_TIMEOUT_S = 120.0
#: Quiet time after the first ticks before the window opens: lets the tick's threads finish
#: their last bookkeeping so the window sees only the idle loop.
SETTLE_S = 1.0
#: How long SIGTERM may take (the systemd units allow 45 s).
STOP_TIMEOUT_S = 45.0
#: Issue 9's target: under 1% of one core between ticks.
MAX_CPU_PERCENT = 1.0
#: Log events that mean "a job's tick ended" (whatever its outcome) and "a job was scheduled".
TICK_ENDED = frozenset({"tick.completed", "tick.failed", "tick.skipped"})
JOB_SCHEDULED = "job.scheduled"
#: Fields of /proc/<pid>/stat after "pid (comm)": utime and stime, in clock ticks.
UTIME_INDEX = 11
STIME_INDEX = 12


def daemon_module() -> str:
    """`daemons` (both daemons in one process) when that entry point exists, else the drain
    daemon alone."""
    return "daemons" if importlib.util.find_spec("daemons.__main__") else "daemons.drain"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of every thread of process `pid` so far."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat.rpartition(")")[2].split()
    return (int(fields[UTIME_INDEX]) + int(fields[STIME_INDEX])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    """Resident set of process `pid` now, in MiB (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def write_config(path: Path, data_dir: Path) -> None:
    """A config whose ticks are a day apart, with reconciliation on so that both daemons tick."""
    path.write_text(
        "[knowledgeBase]\n"
        f'dataDir = "{data_dir}"\n'
        f"remIntervalMs = {IDLE_INTERVAL_MS}\n"
        "reconciliationEnabled = true\n"
        f"reconciliationIntervalMs = {IDLE_INTERVAL_MS}\n"
        'logFormat = "json"\n',
        encoding="utf-8",
    )


def _pump(stream: IO[str], lines: queue.Queue[str]) -> None:
    """Move the daemon's stderr into a queue, so its pipe never fills and blocks it."""
    for line in stream:
        lines.put(line)


def _event(line: str) -> str | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record.get("event") if isinstance(record, dict) else None


def run_idle_benchmark(window_s: float) -> dict[str, Any]:
    """Seed a small store, start the daemon, wait for its first ticks, measure, stop it."""
    workdir = make_workdir("idle")
    try:
        env = child_env(workdir)
        root = workdir / "store"
        progress("idle: seeding a small store")
        run_child(drain_bench.MODULE,
                  ["--seed", str(root), *drain_bench.SMOKE_SIZES.args()], env=env)
        config = workdir / "kb.toml"
        write_config(config, root / "data")
        module = daemon_module()
        progress(f"idle: starting python -m {module}; measuring {window_s:.0f} s between ticks")
        return _measure_daemon(module, config, env, window_s)
    finally:
        remove_tree(workdir)


def _measure_daemon(module: str, config: Path, env: dict[str, str],
                    window_s: float) -> dict[str, Any]:
    process = subprocess.Popen(
        [sys.executable, "-m", module, "--config", str(config)],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    lines: queue.Queue[str] = queue.Queue()
    pump = threading.Thread(target=_pump, args=(process.stderr, lines), daemon=True)
    pump.start()
    seen: list[str] = []
    try:
        started = time.monotonic()
        scheduled = ended = 0
        ready = False
        while not (ready and scheduled and ended >= scheduled):
            if process.poll() is not None:
                raise BenchmarkError(f"python -m {module} exited {process.returncode} before "
                                     f"its first ticks: {''.join(seen[-20:])}")
            if time.monotonic() - started > FIRST_TICKS_TIMEOUT_S:
                raise BenchmarkError(f"python -m {module}: first ticks did not finish in "
                                     f"{FIRST_TICKS_TIMEOUT_S:.0f} s")
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                continue
            seen.append(line)
            event = _event(line)
            scheduled += event == JOB_SCHEDULED
            ended += event in TICK_ENDED
            ready = ready or event == "daemons.ready"
        first_ticks_s = time.monotonic() - started
        time.sleep(SETTLE_S)
        logged_before = len(seen) + lines.qsize()
        cpu_before, wall_before = cpu_seconds(process.pid), time.monotonic()
        time.sleep(window_s)
        cpu_after, wall_after = cpu_seconds(process.pid), time.monotonic()
        rss = rss_mib(process.pid)
        logged_during = len(seen) + lines.qsize() - logged_before
        stop_started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        exit_code = process.wait(timeout=STOP_TIMEOUT_S)
        stop_s = time.monotonic() - stop_started
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        pump.join(timeout=5)
    cpu_s = cpu_after - cpu_before
    percent = 100 * cpu_s / (wall_after - wall_before)
    target = Target("idle: CPU between ticks", percent, MAX_CPU_PERCENT, unit="% of a core")
    return {
        "command": f"python -m {module} --config <temp>/kb.toml",
        "jobs": scheduled,
        "firstTicksS": round(first_ticks_s, 2),
        "windowS": round(wall_after - wall_before, 2),
        "cpuS": round(cpu_s, 3),
        "cpuPercentOfOneCore": round(percent, 3),
        "rssMiB": round(rss, 1),
        "logLinesDuringWindow": logged_during,
        "stopS": round(stop_s, 2),
        "exitCode": exit_code,
        "targets": [target.as_dict()],
    }


def table(result: dict[str, Any]) -> str:
    """The idle section of the printed table."""
    body = format_table(
        ["daemon", "jobs", "window s", "CPU s", "% of one core", "RSS MiB", "stop s", "exit"],
        [[result["command"].split(" --config")[0], result["jobs"], result["windowS"],
          result["cpuS"], result["cpuPercentOfOneCore"], result["rssMiB"], result["stopS"],
          result["exitCode"]]],
    )
    return f"Idle: CPU between ticks (target < {MAX_CPU_PERCENT}% of one core)\n{body}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the idle benchmark and print its table and JSON object."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.idle_bench",
                                     description=__doc__)
    parser.add_argument("--smoke", action="store_true", help=f"a {SMOKE_WINDOW_S:.0f} s window")
    args = parser.parse_args(argv)
    result = run_idle_benchmark(SMOKE_WINDOW_S if args.smoke else FULL_WINDOW_S)
    print(table(result))
    emit_report(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
