"""The reliability harness: a small world (Chroma rows, graph nodes, a queue), processes that
drain it while crashing or competing, and the audit that proves nothing was lost.

Every queue line has a unique relationship (`R<n>`), so each line maps to exactly one edge: a
line applied once leaves its edge with weight 1.0; applied twice, 1.1. The audit accepts only
two fates for a valid line: its edge in the graph exactly once, or the line in the dead-letter
file with a reason. Malformed lines must be dead letters with reason `malformed`.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.config import Settings, load_config
from core.graph import GraphDB
from core.vectors import VectorStore
from tests.reliability.crash_child import POINTS
from tests.support import child_env, seed

ROOT = Path(__file__).resolve().parents[2]
#: Failed tries before a line is dead-lettered in these worlds: small, so that lines to
#: hallucinated targets reach the dead letters within a few final ticks.
MAX_ATTEMPTS = 3
MEMORIES = 200
SESSIONS = 20
CONCEPTS = 10
MALFORMED_SAMPLES = (b"{not json", b"null", b"[1, 2]", b'"text"', b"\xff\xfe\x00",
                     b'{"source": "CONCEPT:c0", "relationship": "R"}', b"123",
                     b'{"source": "CONCEPT:c0", "target": "CONCEPT:c1", "relationship": "R",'
                     b' "weight": NaN}')


@dataclass
class World:
    """A data folder with its config, and the lines appended to its queue so far."""

    root: Path
    config: Path
    settings: Settings
    valid: set[str] = field(default_factory=set)  # relationships of valid lines
    # Distinct malformed lines: byte-identical lines share one identity, so a repeat of a
    # malformed line is recognized as the same line and dead-lettered once.
    malformed: set[bytes] = field(default_factory=set)
    next_line: int = 0
    rng: random.Random = field(default_factory=lambda: random.Random(7))

    @property
    def env(self) -> dict[str, str]:
        return child_env(self.root / "home")

    def line(self) -> bytes:
        """One random line: mostly valid (existing, back-fillable or hallucinated targets),
        some malformed."""
        n = self.next_line
        self.next_line += 1
        roll = self.rng.random()
        if roll < 0.08:
            bad = self.rng.choice(MALFORMED_SAMPLES)
            self.malformed.add(bad)
            return bad
        relationship = f"R{n}"
        self.valid.add(relationship)
        source = f"CONCEPT:c{self.rng.randrange(CONCEPTS)}"
        if roll < 0.45:
            target = f"CONCEPT:c{self.rng.randrange(CONCEPTS)}"
        elif roll < 0.9:
            target = f"{self.rng.choice(['memory', 'MEMORY'])}:m{self.rng.randrange(MEMORIES)}"
        else:
            target = f"memory:ghost{n}"
        return json.dumps({"source": source, "target": target, "relationship": relationship,
                           "justification": f"line {n}", "timestamp": n}).encode()

    def append(self, count: int) -> None:
        """Append lines the way a bare producer does (open, write, close)."""
        path = self.settings.lazy_edges_queue_path
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab") as queue:
            queue.write(b"".join(self.line() + b"\n" for _ in range(count)))


def build_world(root: Path, *, interval_ms: int = 3_600_000) -> World:
    """Seed Chroma (memories with sessions, half of them summarized) and the graph (concept
    nodes), and write the config. Closes every store before returning: children need them."""
    root.mkdir(parents=True, exist_ok=True)
    config = root / "kb.toml"
    config.write_text(
        '[knowledgeBase]\ndataDir = "data"\nlogFormat = "json"\n'
        f"lazyEdgeMaxAttempts = {MAX_ATTEMPTS}\nremIntervalMs = {interval_ms}\n")
    settings = load_config(str(config), environ={}).settings

    async def seed_stores() -> None:
        vectors = await VectorStore.open(settings)
        try:
            await seed(vectors, settings.memory_collection,
                       [(f"m{i}", {"sessionId": f"s{i % SESSIONS}", "createdAt": i,
                                   "userId": "u"}) for i in range(MEMORIES)])
            await seed(vectors, settings.summary_collection,
                       [(f"sum{j}", {"sessionId": f"s{j}", "createdAt": 0, "title": f"S{j}"})
                        for j in range(0, SESSIONS, 2)])
        finally:
            await vectors.close()
        graph = await GraphDB.open(settings.graph_db_path)
        try:
            for c in range(CONCEPTS):
                await graph.upsert_node(f"CONCEPT:c{c}", "CONCEPT")
        finally:
            await graph.close()

    asyncio.run(seed_stores())
    return World(root, config, settings)


def run_crash_child(world: World, point: str, hit: int, *, batch_lines: int = 50,
                    kill_after_s: float | None = None) -> int:
    """Run one drain tick in a child that dies at `point` (or is SIGKILLed by us after
    `kill_after_s`); its exit status (-9 when killed)."""
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.reliability.crash_child", str(world.config), point,
         str(hit), str(batch_lines)],
        cwd=ROOT, env=world.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if kill_after_s is not None:
        try:
            child.wait(kill_after_s)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGKILL)
    _, err = child.communicate(timeout=300)
    if child.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"crash child failed ({child.returncode}): {err.decode()[-3000:]}")
    return child.returncode


def drain_tick(world: World) -> subprocess.CompletedProcess[bytes]:
    """One clean `python -m daemons.drain --tick`."""
    return subprocess.run([sys.executable, "-m", "daemons.drain", "--tick", "--json", "--config",
                           str(world.config)], cwd=ROOT, env=world.env, capture_output=True,
                          timeout=300, check=False)


def final_drain(world: World) -> None:
    """Tick until the queue and `.draining` are gone (re-queued lines need up to
    MAX_ATTEMPTS ticks to apply or reach the dead letters)."""
    s = world.settings
    for _ in range(MAX_ATTEMPTS + 3):
        result = drain_tick(world)
        assert result.returncode == 0, result.stderr.decode()[-3000:]
        if not s.lazy_edges_queue_path.exists() and not s.draining_path.exists():
            return
    raise AssertionError("the queue did not empty")


@dataclass
class Audit:
    """Where every appended line ended up."""

    appended: int
    in_graph: int
    dead_lettered: int
    malformed_dead: int
    pending: int
    lost: list[str]
    applied_twice: list[str]
    both: list[str]
    dead_without_reason: int
    unexpected_edges: int

    malformed_appended: int = 0

    @property
    def ok(self) -> bool:
        """Nothing lost, nothing applied twice, nothing both applied and dead, every distinct
        malformed line dead-lettered (once all pending lines are drained)."""
        malformed_missing = self.pending == 0 and self.malformed_dead < self.malformed_appended
        return not (self.lost or self.applied_twice or self.both or self.dead_without_reason
                    or self.unexpected_edges or malformed_missing)

    def row(self) -> dict[str, Any]:
        return {"linesAppended": self.appended, "linesInGraph": self.in_graph,
                "linesDeadLettered": self.dead_lettered + self.malformed_dead,
                "linesPending": self.pending, "linesLost": len(self.lost),
                "appliedTwice": len(self.applied_twice)}


def _relationship_of(text: str) -> str | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    rel = value.get("relationship") if isinstance(value, dict) else None
    return rel if isinstance(rel, str) else None


def pending_relationships(settings: Settings) -> Counter[str]:
    """Relationships of valid lines still on disk (queue or `.draining`)."""
    found: Counter[str] = Counter()
    for path in (settings.lazy_edges_queue_path, settings.draining_path):
        if path.exists():
            for raw in path.read_bytes().splitlines():
                rel = _relationship_of(raw.decode("utf-8", "replace"))
                if rel is not None:
                    found[rel] += 1
    return found


def audit(world: World, *, allow_pending: bool = False) -> Audit:
    """Check every line's fate (see the module docstring)."""
    s = world.settings
    edges: dict[str, list[float]] = {}
    if s.graph_db_path.exists():
        db = sqlite3.connect(f"file:{s.graph_db_path}?mode=ro", uri=True)
        try:
            for rel, weight in db.execute(
                    "SELECT relationship, weight FROM edges WHERE relationship != 'ORIGINATES_IN'"):
                edges.setdefault(rel, []).append(weight)
        finally:
            db.close()
    dead: Counter[str] = Counter()
    malformed_ids: set[str] = set()
    without_reason = 0
    if s.dead_letter_path.exists():
        for raw in s.dead_letter_path.read_text().splitlines():
            record = json.loads(raw)
            if not record.get("reason"):
                without_reason += 1
            if record.get("reason") == "malformed":
                # Dead letters are written at least once: a crash between writing them and
                # the commit that settles them repeats them on replay (same lineId).
                malformed_ids.add(record["lineId"])
                continue
            rel = _relationship_of(record.get("line", ""))
            if rel is not None:
                dead[rel] += 1
    pending = pending_relationships(s) if allow_pending else Counter()
    lost, twice, both = [], [], []
    for rel in sorted(world.valid):
        weights = edges.get(rel, [])
        if len(weights) > 1 or any(w != 1.0 for w in weights):
            twice.append(rel)
        if weights and dead[rel]:
            both.append(rel)
        if not weights and not dead[rel] and not pending[rel]:
            lost.append(rel)
    unexpected = sum(len(w) for rel, w in edges.items() if rel not in world.valid)
    return Audit(
        appended=len(world.valid) + len(world.malformed),
        in_graph=sum(1 for rel in world.valid if edges.get(rel)),
        dead_lettered=sum(1 for rel in world.valid if dead[rel]),
        malformed_dead=len(malformed_ids),
        pending=sum(1 for rel in world.valid if pending[rel]),
        lost=lost, applied_twice=twice, both=both,
        dead_without_reason=without_reason, unexpected_edges=unexpected,
        malformed_appended=len(world.malformed))


def crash_trials(root: Path, *, trials: int, lines_per_trial: int,
                 seed_value: int = 7) -> tuple[Audit, Counter[str]]:
    """Append, drain in a child killed at a point (each named point in turn, then random
    moments), repeat; then drain cleanly and audit."""
    world = build_world(root)
    world.rng = random.Random(seed_value)
    points = [p for p in POINTS if p != "none"]
    # Points passed once per tick die on their first pass; per-batch points at a random batch.
    per_batch = {"mid-transaction": 4, "after-dead-letters": 3, "after-commit": 4,
                 "before-remove": 2}
    outcomes: Counter[str] = Counter()
    for trial in range(trials):
        world.append(lines_per_trial)
        if trial < len(points):
            point, hit = points[trial], 1
        elif trial % 3 != 2:
            point = world.rng.choice(points)
            hit = world.rng.randint(1, per_batch.get(point, 1))
        else:
            point, hit = "random", 0
        if point == "random":
            status = run_crash_child(world, "none", 0,
                                     kill_after_s=world.rng.uniform(0.3, 2.5))
        else:
            status = run_crash_child(world, point, hit)
        outcomes[f"{point}:{'killed' if status else 'finished'}"] += 1
        interim = audit(world, allow_pending=True)
        assert not interim.applied_twice and not interim.lost, interim
    final_drain(world)
    return audit(world), outcomes


def producers_and_drainer(root: Path, *, producers: int, lines_each: int) -> Audit:
    """Producers (half through `enqueue`, half bare appends) write while the drain daemon
    ticks back to back; then a clean drain and the audit."""
    world = build_world(root, interval_ms=200)
    daemon = subprocess.Popen([sys.executable, "-m", "daemons.drain", "--config",
                               str(world.config)], cwd=ROOT, env=world.env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    script = ROOT / "tests/reliability/producer.py"
    procs = []
    for p in range(producers):
        mode = "enqueue" if p % 2 == 0 else "bare"
        procs.append(subprocess.Popen(
            [sys.executable, str(script), mode, str(world.config), str(p), str(lines_each)],
            cwd=ROOT, env=world.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err.decode()[-3000:]
        world.valid.update(out.decode().split())
    time.sleep(0.5)
    daemon.send_signal(signal.SIGTERM)
    _, err = daemon.communicate(timeout=120)
    assert daemon.returncode == 0, err.decode()[-3000:]
    final_drain(world)
    return audit(world)


def two_drainers_at_once(root: Path, *, lines: int) -> tuple[list[int], list[str], Audit]:
    """Start two one-shot drains together on one queue; their exit codes and errors, and the
    audit after a final clean drain."""
    world = build_world(root)
    world.append(lines)
    command = [sys.executable, "-m", "daemons.drain", "--tick", "--config", str(world.config)]
    children = [subprocess.Popen(command, cwd=ROOT, env=world.env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE) for _ in range(2)]
    errors = [child.communicate(timeout=300)[1].decode() for child in children]
    codes = [child.returncode for child in children]
    final_drain(world)
    return codes, errors, audit(world)
