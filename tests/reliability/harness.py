"""The reliability harness: a small world (Chroma rows, graph nodes, a queue), processes that
drain it while crashing or competing, and the audit that proves nothing was lost.

Every distinct queue line has its own relationship (`R<n>`), so it maps to exactly one edge,
and some lines are appended again byte for byte: each copy is one mention. An edge's weight
says how many copies took effect (1.0 for one, 1.1 for two, ...: every line has weight 1).
The audit accepts only two fates for each copy: applied once, or dead-lettered once with a
reason. Malformed lines (some repeated byte for byte too, some over the 1 MiB limit) must be
dead letters with reason `malformed`, one record each; no two records may share a `readAt`.

A world's graph is this project's file, or (`neo=True`) a neo.mjs graph of the latest era
(`tests.neo_graphs`), whose edges are the original's `Edges` documents, the weight in
`properties.weight`.
"""

from __future__ import annotations

import asyncio
import hashlib
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

from core.base.chroma import VectorStore
from core.base.config.config import Settings
from core.base.rules.graph_schema import NeoEra
from core.base.runtime.config_file import load_config
from core.base.state.graph import REINFORCE_FACTOR
from core.base.state.neo.schema import OWN_PREFIX
from core.drain.stores.queue_files import read_sidecar
from tests.neo_graphs import build_neo_graph
from tests.reliability.crash_child import POINTS, TARGETS
from tests.support import child_env, seed, seed_concepts

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
                     b' "weight": NaN}',
                     b'{"source": "CONCEPT:c0", "target": "CONCEPT:c1", "relationship": "\\ud800"}',
                     b'{"source": "CONCEPT:c0", "target": "CONCEPT:c1", "relationship": "R",'
                     b' "x": 1e999}')
#: Shares of the lines a world appends: byte-identical repeats of an earlier valid line,
#: malformed lines, and lines over the 1 MiB limit (dead-lettered with their bytes in a file).
REPEAT_SHARE = 0.15
MALFORMED_SHARE = 0.08
OVERSIZE_SHARE = 0.003
OVERSIZE_LINE = b'{"padding": "' + b"x" * ((1 << 20) + 4096) + b'"}'
#: Points of the drain that a crash child dies at on the n-th pass (points passed once per
#: tick die on their first pass); used to vary where per-batch points strike.
PER_BATCH_POINTS = {"mid-transaction": 4, "after-dead-letters": 3, "after-requeue": 3,
                    "after-commit": 4, "before-remove": 2}


@dataclass
class World:
    """A data folder with its config, and the lines appended to its queue so far."""

    root: Path
    config: Path
    settings: Settings
    #: Relationship of each distinct valid line -> copies appended.
    valid: Counter[str] = field(default_factory=Counter)
    #: Malformed lines appended (copies counted: each is a line of its own).
    malformed: int = 0
    #: Valid lines appended as a byte-identical copy of an earlier one.
    repeats: int = 0
    lines: dict[str, bytes] = field(default_factory=dict)
    next_line: int = 0
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    #: Whether the graph is a neo.mjs one (the original's tables, the daemons' own prefixed).
    neo: bool = False

    def table(self, name: str) -> str:
        """One of the daemons' own tables, by its name in this world's file."""
        return OWN_PREFIX + name if self.neo else name

    @property
    def env(self) -> dict[str, str]:
        return child_env(self.root / "home")

    def line(self) -> bytes:
        """One random line: mostly valid (existing, back-fillable or hallucinated targets),
        some a byte-identical repeat of an earlier one, some malformed or over the limit."""
        n = self.next_line
        self.next_line += 1
        roll = self.rng.random()
        if roll < OVERSIZE_SHARE:
            self.malformed += 1
            return OVERSIZE_LINE
        if roll < MALFORMED_SHARE:
            self.malformed += 1
            return self.rng.choice(MALFORMED_SAMPLES)
        if roll < MALFORMED_SHARE + REPEAT_SHARE and self.lines:
            relationship = self.rng.choice(list(self.lines))
            self.valid[relationship] += 1
            self.repeats += 1
            return self.lines[relationship]
        relationship = f"R{n}"
        self.valid[relationship] += 1
        source = f"CONCEPT:c{self.rng.randrange(CONCEPTS)}"
        if roll < 0.45:
            target = f"CONCEPT:c{self.rng.randrange(CONCEPTS)}"
        elif roll < 0.9:
            target = f"{self.rng.choice(['memory', 'MEMORY'])}:m{self.rng.randrange(MEMORIES)}"
        else:
            target = f"memory:ghost{n}"
        line = json.dumps({"source": source, "target": target, "relationship": relationship,
                           "justification": f"line {n}", "timestamp": n}).encode()
        self.lines[relationship] = line
        return line

    def append(self, count: int, *, oversize: int = 0) -> None:
        """Append lines the way a bare producer does (open, write, close); `oversize` more
        lines over the limit among them."""
        lines = [self.line() for _ in range(count)]
        for _ in range(oversize):
            self.malformed += 1
            lines.insert(self.rng.randrange(len(lines) + 1), OVERSIZE_LINE)
        path = self.settings.drain.lazy_edges_queue_path
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab") as queue:
            queue.write(b"".join(line + b"\n" for line in lines))


def build_world(root: Path, *, interval_ms: int = 3_600_000, neo: bool = False) -> World:
    """Seed Chroma (memories with sessions, half of them summarized) and the graph (concept
    nodes; with `neo`, in a neo.mjs E3 graph file), and write the config. Closes every store
    before returning: children need them."""
    root.mkdir(parents=True, exist_ok=True)
    config = root / "kb.toml"
    neo_keys = ""
    if neo:
        build_neo_graph(root / "neo-graph.sqlite", NeoEra.E3, nodes=())
        neo_keys = 'graphDbPath = "neo-graph.sqlite"\ngraphSchema = "neo"\n'
    config.write_text(
        '[knowledgeBase]\ndataDir = "data"\nlogFormat = "json"\n'
        f"lazyEdgeMaxAttempts = {MAX_ATTEMPTS}\nremIntervalMs = {interval_ms}\n{neo_keys}")
    settings = load_config(str(config), environ={}).settings

    async def seed_stores() -> None:
        vectors = await VectorStore.open(settings.chroma)
        try:
            await seed(vectors, settings.chroma.memory_collection,
                       [(f"m{i}", {"sessionId": f"s{i % SESSIONS}", "createdAt": i,
                                   "userId": "u"}) for i in range(MEMORIES)])
            await seed(vectors, settings.chroma.summary_collection,
                       [(f"sum{j}", {"sessionId": f"s{j}", "createdAt": 0, "title": f"S{j}"})
                        for j in range(0, SESSIONS, 2)])
        finally:
            await vectors.close()
        await seed_concepts(settings, CONCEPTS)

    asyncio.run(seed_stores())
    return World(root, config, settings, neo=neo)


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
        if not s.drain.lazy_edges_queue_path.exists() and not s.drain.draining_path.exists():
            return
    raise AssertionError("the queue did not empty")


@dataclass
class Audit:
    """Where every appended line ended up (copies counted one by one)."""

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
    #: Positions (`readAt`) with more than one dead-letter record.
    dead_twice: list[str] = field(default_factory=list)
    #: Over-limit lines whose side file is missing or does not match its record.
    spill_mismatches: list[str] = field(default_factory=list)
    malformed_appended: int = 0
    repeats_appended: int = 0

    @property
    def ok(self) -> bool:
        """Nothing lost, nothing applied twice, nothing both applied and dead, no line with two
        dead letters, every malformed line dead-lettered once (once nothing is pending)."""
        malformed_wrong = self.malformed_dead > self.malformed_appended or (
            self.pending == 0 and self.malformed_dead != self.malformed_appended)
        return not (self.lost or self.applied_twice or self.both or self.dead_without_reason
                    or self.unexpected_edges or malformed_wrong or self.dead_twice
                    or self.spill_mismatches)

    def row(self) -> dict[str, Any]:
        return {"linesAppended": self.appended, "byteIdenticalRepeats": self.repeats_appended,
                "linesInGraph": self.in_graph,
                "linesDeadLettered": self.dead_lettered + self.malformed_dead,
                "linesPending": self.pending, "linesLost": len(self.lost),
                "appliedTwice": len(self.applied_twice),
                "deadLetteredTwice": len(self.dead_twice)}


def _relationship_of(text: str | bytes) -> str | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    rel = value.get("relationship") if isinstance(value, dict) else None
    return rel if isinstance(rel, str) else None


def pending_relationships(world: World) -> Counter[str]:
    """Copies of valid lines still on disk (queue or `.draining`), by relationship. Lines a
    committed batch already read are skipped, and so are re-queued copies whose token is used
    up (a crash left them; the drainer skips them): neither is pending."""
    settings = world.settings
    found: Counter[str] = Counter()
    committed, tokens = _drain_state(world)
    for path in (settings.drain.lazy_edges_queue_path, settings.drain.draining_path):
        if not path.exists():
            continue
        start = 0
        if path == settings.drain.draining_path:
            segment = read_sidecar(path)
            start = committed.get(segment.id, 0) if segment is not None else 0
        with path.open("rb") as stream:
            stream.seek(start)
            for raw in stream:
                if len(raw) > 1 << 20:
                    continue
                try:
                    value = json.loads(raw)
                except ValueError:
                    continue
                if not isinstance(value, dict) or not isinstance(value.get("relationship"), str):
                    continue
                drain = value.get("_drain")
                if isinstance(drain, dict) and tokens.get(str(drain.get("lineId"))) != drain.get(
                        "attempts"):
                    continue
                found[value["relationship"]] += 1
    return found


def _drain_state(world: World) -> tuple[dict[str, int], dict[str, int]]:
    """Committed offsets by segment, and outstanding re-queue tokens."""
    settings = world.settings
    if not settings.state.graph_db_path.exists():
        return {}, {}
    db = sqlite3.connect(f"file:{settings.state.graph_db_path}?mode=ro", uri=True)
    try:
        committed = dict(db.execute("SELECT generation, committed_offset FROM "
                                    + world.table("drain_generations")))
        tokens = dict(db.execute("SELECT line_id, attempts FROM "
                                 + world.table("drain_requeued")))
    except sqlite3.OperationalError:
        return {}, {}
    finally:
        db.close()
    return committed, tokens


def audit(world: World, *, allow_pending: bool = False) -> Audit:
    """Check every copy's fate (see the module docstring)."""
    s = world.settings
    applied: Counter[str] = Counter()
    unexpected = 0
    if s.state.graph_db_path.exists():
        db = sqlite3.connect(f"file:{s.state.graph_db_path}?mode=ro", uri=True)
        edges = ("SELECT type, json_extract(data, '$.properties.weight') FROM Edges "
                 "WHERE type != 'ORIGINATES_IN'" if world.neo else
                 "SELECT relationship, weight FROM edges WHERE relationship != 'ORIGINATES_IN'")
        try:
            for rel, weight in db.execute(edges):
                if rel not in world.valid:
                    unexpected += 1
                    continue
                applied[rel] += round((weight - 1.0) / REINFORCE_FACTOR) + 1
        finally:
            db.close()
    dead: Counter[str] = Counter()
    malformed_dead = 0
    without_reason = 0
    read_at: Counter[str] = Counter()
    spill_mismatches: list[str] = []
    if s.drain.dead_letter_path.exists():
        for raw in s.drain.dead_letter_path.read_bytes().splitlines():
            record = json.loads(raw)
            read_at[record.get("readAt")] += 1
            if not record.get("reason"):
                without_reason += 1
            if record.get("reason") == "malformed":
                malformed_dead += 1
                spilled_to = s.drain.dead_letter_path.parent
                if "lineFile" in record and not _spill_matches(spilled_to, record):
                    spill_mismatches.append(record["readAt"])
                continue
            rel = _relationship_of(record.get("line", ""))
            if rel is not None:
                dead[rel] += 1
    pending = pending_relationships(world) if allow_pending else Counter()
    lost, twice, both = [], [], []
    for rel, copies in sorted(world.valid.items()):
        if applied[rel] + dead[rel] > copies:
            twice.append(rel)
        if applied[rel] and dead[rel]:
            both.append(rel)
        if applied[rel] + dead[rel] + pending[rel] < copies:
            lost.append(rel)
    return Audit(
        appended=sum(world.valid.values()) + world.malformed,
        in_graph=sum(min(applied[rel], n) for rel, n in world.valid.items()),
        dead_lettered=sum(min(dead[rel], n) for rel, n in world.valid.items()),
        malformed_dead=malformed_dead,
        pending=sum(min(pending[rel], n) for rel, n in world.valid.items()),
        lost=lost, applied_twice=twice, both=both,
        dead_without_reason=without_reason, unexpected_edges=unexpected,
        dead_twice=sorted(str(k) for k, n in read_at.items() if n > 1),
        spill_mismatches=spill_mismatches,
        malformed_appended=world.malformed, repeats_appended=world.repeats)


def _spill_matches(folder: Path, record: dict[str, Any]) -> bool:
    path = folder / record["lineFile"]
    if not path.exists() or path.stat().st_size != record["lineBytes"]:
        return False
    return bool(hashlib.sha256(path.read_bytes()).hexdigest() == record["lineSha256"])


def crash_trials(root: Path, *, trials: int, lines_per_trial: int, seed_value: int = 7,
                 neo: bool = False) -> tuple[Audit, Counter[str]]:
    """Append, drain in a child killed at a point (each named point in turn, then random
    moments), repeat; then drain cleanly and audit (on a neo.mjs graph with `neo`)."""
    world = build_world(root, neo=neo)
    world.rng = random.Random(seed_value)
    points = [p for p in POINTS if p != "none"]
    per_batch = PER_BATCH_POINTS
    outcomes: Counter[str] = Counter()
    for trial in range(trials):
        if trial < len(points):
            point, hit = points[trial], 1
        elif trial % 3 != 2:
            point = world.rng.choice(points)
            hit = world.rng.randint(1, per_batch.get(point, 1))
        else:
            point, hit = "random", 0
        world.append(lines_per_trial, oversize=int(point == "after-spill"))
        if point == "random":
            status = run_crash_child(world, "none", 0,
                                     kill_after_s=world.rng.uniform(0.3, 2.5))
        else:
            status = run_crash_child(world, point, hit)
        outcomes[f"{point}:{'killed' if status else 'finished'}"] += 1
        interim = audit(world, allow_pending=True)
        assert not (interim.applied_twice or interim.lost or interim.dead_twice), interim
    final_drain(world)
    return audit(world), outcomes


def points_never_killed(outcomes: Counter[str]) -> list[str]:
    """The named crash points `crash_trials` tried at which no child died (each is tried
    first, on its first pass): a wrapper that is never called would let its trials pass
    while crashing nowhere."""
    tried = {key.split(":")[0] for key in outcomes}
    killed = {key.split(":")[0] for key, n in outcomes.items() if key.endswith(":killed") and n}
    return [point for point in TARGETS if point in tried and point not in killed]


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
        written = Counter(out.decode().split())
        world.valid.update(written)
        world.repeats += sum(n - 1 for n in written.values())
    time.sleep(0.5)
    _wait_for_a_tick(world, daemon)
    daemon.send_signal(signal.SIGTERM)
    _, err = daemon.communicate(timeout=120)
    assert daemon.returncode == 0, err.decode()[-3000:]
    final_drain(world)
    return audit(world)


def _wait_for_a_tick(world: World, daemon: subprocess.Popen[bytes], *,
                     timeout_s: float = 120.0) -> None:
    """Wait until the daemon has recorded a tick (or exited): on a loaded machine producers
    can finish while it is still importing, and a SIGTERM then finds no handler yet and kills
    it (-15) instead of stopping it."""
    deadline = time.monotonic() + timeout_s
    while daemon.poll() is None and time.monotonic() < deadline:
        try:
            db = sqlite3.connect(f"file:{world.settings.state.graph_db_path}?mode=ro", uri=True)
            try:
                ticks = world.table("daemon_ticks")
                if db.execute(f"SELECT 1 FROM {ticks} WHERE daemon = 'drain'").fetchone():
                    return
            finally:
                db.close()
        except sqlite3.OperationalError:
            pass  # the table is created by the daemon's first store open
        time.sleep(0.1)


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
