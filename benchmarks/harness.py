"""What every benchmark shares: temp folders, child processes, memory figures, targets, tables.

Each contender runs in a child process of its own (`python -m benchmarks.<bench> --contender X
--data DIR`), so one contender's caches, heap and Chroma handles can never flatter or penalize
the next one, and so the whole-process time (interpreter start, `import chromadb`, opening the
stores) can be measured beside the in-process time the child reports. A child prints exactly one
JSON object on stdout; its logs go to stderr, which the parent shows only when the child fails.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

#: Prefix of every temp folder a benchmark makes (all under the system temp dir, never the
#: repository or $HOME), so a leftover from a killed run is easy to recognize and remove.
WORKDIR_PREFIX = "kb-bench-"
#: The longest a child may run before the benchmark gives up on it. The slowest full-size
#: child (the per-edge baseline) takes under a minute here; ten leave room for a busy machine.
CHILD_TIMEOUT_S = 600.0
#: How much of a failed child's stderr is quoted in the error (its last lines say why).
STDERR_TAIL_CHARS = 4_000
#: The folder under a contender's root that holds its store (tests.support.make_settings's
#: `dataDir`).
DATA_SUBDIR = "data"
#: Bytes in one of `ru_maxrss`'s units: Linux reports kibibytes.
RU_MAXRSS_UNIT_BYTES = 1024
#: Linux's per-process memory figures and the file that resets the peak (`reset_peak_rss`).
PROC_STATUS = "/proc/self/status"
PROC_CLEAR_REFS = "/proc/self/clear_refs"
#: Bytes in one of `/proc/self/status`'s memory units (it says "kB": kibibytes).
PROC_STATUS_UNIT_BYTES = 1024
MIB = 1024 * 1024


class BenchmarkError(RuntimeError):
    """A benchmark could not produce its figures (a child failed or printed no report)."""


def make_workdir(label: str) -> Path:
    """A fresh temp folder for one benchmark's data; the caller removes it (`remove_tree`)."""
    return Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{label}-"))


def remove_tree(path: Path) -> None:
    """Remove a benchmark folder, ignoring what is already gone."""
    shutil.rmtree(path, ignore_errors=True)


def copy_data(source: Path, destination: Path) -> Path:
    """A fresh copy of a seeded contender root, so every contender starts from the same bytes
    (seeding Chroma costs ~3,500 rows/s; copying its folder costs a fraction of a second)."""
    shutil.copytree(source, destination)
    return destination


def child_env(workdir: Path) -> dict[str, str]:
    """The environment of every child: its own $HOME inside the benchmark's temp folder (a
    library that writes caches under $HOME writes them there and they go with the folder),
    no telemetry, no config file picked up by accident, and the repository importable."""
    home = workdir / "home"
    home.mkdir(exist_ok=True)
    env = dict(os.environ)
    env.update({
        "HOME": str(home),
        "ANONYMIZED_TELEMETRY": "False",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(repo_root()), env.get("PYTHONPATH")])),
    })
    env.pop("KB_CONFIG", None)
    return env


def repo_root() -> Path:
    """The repository this benchmark package belongs to (the children import from it)."""
    return Path(__file__).resolve().parent.parent


@dataclass(frozen=True, slots=True)
class ChildRun:
    """A child's JSON report and the wall time the parent measured around the whole child."""

    report: dict[str, Any]
    wall_s: float


def run_child(module: str, args: Sequence[str], *, env: Mapping[str, str],
              timeout_s: float = CHILD_TIMEOUT_S) -> ChildRun:
    """Run `python -m module args...`, time it from spawn to exit, and parse its report (the
    last non-empty line of its stdout). Raises BenchmarkError, quoting its stderr, when it
    fails: a benchmark that silently reported nothing would be worse than one that stops."""
    command = [sys.executable, "-m", module, *args]
    started = time.perf_counter()
    try:
        done = subprocess.run(command, env=dict(env), capture_output=True, text=True,
                              timeout=timeout_s, cwd=repo_root(), check=False)
    except subprocess.TimeoutExpired as exc:
        raise BenchmarkError(f"{' '.join(command)} ran over {timeout_s:.0f} s") from exc
    wall_s = time.perf_counter() - started
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or not lines:
        raise BenchmarkError(
            f"{' '.join(command[2:])} exited {done.returncode}; stderr:\n"
            f"{done.stderr[-STDERR_TAIL_CHARS:]}"
        )
    try:
        report = json.loads(lines[-1])
    except ValueError as exc:
        raise BenchmarkError(f"{' '.join(command[2:])} printed no JSON report: {lines[-1]!r}") \
            from exc
    if not isinstance(report, dict):
        raise BenchmarkError(f"{' '.join(command[2:])} report is not an object: {report!r}")
    return ChildRun(report, wall_s)


def emit_report(report: Mapping[str, Any]) -> None:
    """A child's one JSON object on stdout (the parent reads the last line)."""
    sys.stdout.write(json.dumps(report, sort_keys=True) + "\n")
    sys.stdout.flush()


def set_up_child() -> None:
    """A child process set up as every command sets up its own (`daemons.cli.commands.run_main`: the
    malloc arena cap, before any store opens), every contender alike, floors included; and
    logging of warnings and errors only, on stderr: a benchmark measures the work, not the
    logging of it, and info lines per batch would fill the parent's capture for nothing."""
    from core.base.runtime.logs import configure_logging
    from core.base.runtime.process import limit_malloc_arenas

    limit_malloc_arenas()
    configure_logging("json", level=logging.WARNING)


def peak_rss_mib() -> float:
    """This process's peak resident set so far (`ru_maxrss`), in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * RU_MAXRSS_UNIT_BYTES / MIB


def _status_mib(field: str) -> float | None:
    """One `/proc/self/status` memory field (`VmRSS`, `VmHWM`) in MiB; None off Linux."""
    try:
        with open(PROC_STATUS, encoding="ascii") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * PROC_STATUS_UNIT_BYTES / MIB
    except OSError:
        return None
    return None


def reset_peak_rss() -> float:
    """Start a new peak-memory window and return the resident set now, in MiB.

    Linux resets the process's high-water mark (`VmHWM`) when "5" is written to
    `/proc/self/clear_refs`, so the peak a pass reaches is measured from where it starts, not
    hidden under an earlier peak (opening a store can peak above where it settles). Elsewhere
    the window cannot be reset: `ru_maxrss` is used and the growth is a lower bound."""
    try:
        with open(PROC_CLEAR_REFS, "w", encoding="ascii") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return peak_rss_mib()
    return _status_mib("VmRSS") or peak_rss_mib()


def window_peak_rss_mib() -> float:
    """The peak resident set since the last `reset_peak_rss` (Linux), in MiB."""
    return _status_mib("VmHWM") or peak_rss_mib()


@dataclass(slots=True)
class Measure:
    """In-process time and peak-memory growth of one pass, taken inside the child."""

    seconds: float = 0.0
    rss_before_mib: float = 0.0
    rss_after_mib: float = 0.0
    _started: float = 0.0

    def start(self) -> None:
        """Call right before the pass (stores open, imports done)."""
        self.rss_before_mib = reset_peak_rss()
        self._started = time.perf_counter()

    def stop(self) -> None:
        """Call right after the pass."""
        self.seconds = time.perf_counter() - self._started
        self.rss_after_mib = window_peak_rss_mib()

    def figures(self) -> dict[str, float]:
        """The child's timing and memory figures (the parent adds the wall time)."""
        return {
            "inProcessS": round(self.seconds, 4),
            "rssAtStartMiB": round(self.rss_before_mib, 1),
            "peakRssMiB": round(self.rss_after_mib, 1),
            "peakRssGrowthMiB": round(self.rss_after_mib - self.rss_before_mib, 1),
        }


@dataclass(frozen=True, slots=True)
class Target:
    """One of the issue's targets and whether this run met it."""

    name: str
    value: float
    limit: float
    #: "max": the value must be at most the limit; "min": at least.
    kind: Literal["max", "min"] = "max"
    unit: str = ""

    @property
    def met(self) -> bool:
        """Whether the value is on the right side of the limit."""
        return self.value <= self.limit if self.kind == "max" else self.value >= self.limit

    def as_dict(self) -> dict[str, Any]:
        """The target in the JSON report."""
        return {"name": self.name, "value": round(self.value, 3), "limit": round(self.limit, 3),
                "kind": self.kind, "unit": self.unit, "met": self.met}

    def line(self) -> str:
        """One line of the printed summary."""
        sign = "<=" if self.kind == "max" else ">="
        verdict = "met" if self.met else "MISSED"
        return (f"{verdict:6} {self.name}: {self.value:.2f}{self.unit} "
                f"(target {sign} {self.limit:.2f}{self.unit})")


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, or infinity when the denominator is zero (a smoke run can
    time a trivial pass at 0 s; the report must still be valid JSON-able numbers)."""
    return numerator / denominator if denominator > 0 else float("inf")


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain fixed-width table (right-aligned numbers), readable in a terminal and a README."""
    cells = [[_cell(value) for value in row] for row in rows]
    numeric = [[isinstance(value, (int, float)) for value in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h)
              for i, h in enumerate(headers)]
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip(),
           "  ".join("-" * w for w in widths)]
    for row, kinds in zip(cells, numeric, strict=True):
        out.append("  ".join(
            c.rjust(w) if is_number else c.ljust(w)
            for c, w, is_number in zip(row, widths, kinds, strict=True)
        ).rstrip())
    return "\n".join(out)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if value == float("inf"):
            return "inf"
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "chromadb": importlib.metadata.version("chromadb"),
        "platform": platform.platform(),
        "loadAverage1m": round(os.getloadavg()[0], 2),
    }


def progress(message: str) -> None:
    """A progress line on stderr (stdout carries only the table and the JSON object)."""
    sys.stderr.write(f"[bench] {message}\n")
    sys.stderr.flush()
