"""A drainer per host on one PostgreSQL state: two drain processes (two data folders as two
hosts, two queues, the session's real PostgreSQL), producers appending byte-identical twin
lines to both queues, each drainer killed -9 at random points again and again. Every mention
must count exactly once in the shared graph, and no line may be dead-lettered twice.

Each distinct valid line has its own relationship (`R<n>`), so it maps to one edge whose
weight says how many copies took effect (1.0 for one, +REINFORCE_FACTOR for each more).
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from core.base.config.config import Settings
from core.base.runtime.config_file import load_config
from core.drain.stores.drainer_identity import drainer_id_path
from tests.postgres_server import PostgresServer
from tests.support import REPO, child_env, edge_mentions, seed_concepts

ROOT = REPO
#: Rounds of appends and killed drains: at least MIN_ROUNDS, then until each drainer was
#: killed MIN_KILLS times, at most MAX_ROUNDS.
MIN_ROUNDS = 8
MIN_KILLS = 3
MAX_ROUNDS = 20
CONCEPTS = 8
#: Kill points of the crash child a round picks from, each on a random pass: mostly points
#: that leave a `.draining` with some batches committed and some not (the state another
#: drainer's commits must not disturb); `none` lets the tick finish.
KILL_POINTS = ("after-commit", "after-commit", "mid-transaction", "after-rename",
               "before-remove", "after-remove", "none")
MALFORMED = b"{not json"


@dataclass
class Host:
    """One host: its data folder, config, and the copies of each line appended to its queue."""

    root: Path
    config: Path
    settings: Settings
    copies: Counter[str] = field(default_factory=Counter)
    malformed: int = 0

    def append(self, lines: list[bytes]) -> None:
        path = self.settings.drain.lazy_edges_queue_path
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab") as queue:
            queue.write(b"".join(line + b"\n" for line in lines))
        for line in lines:
            if line == MALFORMED:
                self.malformed += 1
            else:
                self.copies[json.loads(line)["relationship"]] += 1


def _host(root: Path, state_url: str) -> Host:
    root.mkdir(parents=True)
    config = root / "kb.toml"
    config.write_text(f'[knowledgeBase]\ndataDir = "data"\nlogFormat = "json"\n'
                      f"stateUrl = {json.dumps(state_url)}\n", encoding="utf-8")
    return Host(root, config, load_config(str(config), environ={}).settings)


def _crash_child(host: Host, point: str, hit: int, kill_after_s: float) -> int:
    """One drain tick of `host` that dies at `point` (its `hit`-th pass) or is killed by us
    after `kill_after_s`; its exit status."""
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.reliability.crash_child", str(host.config), point,
         str(hit), "7"], cwd=ROOT, env=child_env(host.root / "home"),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        child.wait(kill_after_s)
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGKILL)
    _, err = child.communicate(timeout=120)
    assert child.returncode in (0, -signal.SIGKILL), err.decode()[-3000:]
    return child.returncode


def _clean_tick(host: Host) -> None:
    done = subprocess.run([sys.executable, "-m", "daemons.drain", "--tick", "--json",
                           "--config", str(host.config)], cwd=ROOT,
                          env=child_env(host.root / "home"), capture_output=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr.decode()[-3000:]


@dataclass
class TwoDrainersOutcome:
    """What a run of two drainers killed at random points left in the shared graph."""

    rounds: int
    kills: tuple[int, int]
    lines_appended: int
    mentions_in_graph: int
    dead_lettered: int
    applied_twice: list[str]
    lost: list[str]
    dead_lettered_twice: int
    dead_letters_not_malformed: int

    @property
    def ok(self) -> bool:
        return not (self.applied_twice or self.lost or self.dead_lettered_twice
                    or self.dead_letters_not_malformed)

    def row(self) -> dict[str, int]:
        return {"linesAppended": self.lines_appended, "linesInGraph": self.mentions_in_graph,
                "linesDeadLettered": self.dead_lettered,
                "linesLost": max(0, self.lines_appended - self.mentions_in_graph
                                 - self.dead_lettered),
                "appliedTwice": len(self.applied_twice),
                "deadLetteredTwice": self.dead_lettered_twice}


def two_drainers_killed(root: Path, url: str, *, min_kills: int = MIN_KILLS,
                        min_rounds: int = MIN_ROUNDS, max_rounds: int = MAX_ROUNDS,
                        seed: int = 27) -> TwoDrainersOutcome:
    """Two hosts (two data folders, two queues) on the database `url`: rounds of twin lines
    appended to both queues and both drainers started at once and killed at random points,
    at least `min_rounds` rounds and until each drainer was killed `min_kills` times (at most
    `max_rounds`), then clean ticks; what the shared graph and the dead letters hold."""
    hosts = (_host(root / "a", url), _host(root / "b", url))
    asyncio.run(seed_concepts(hosts[0].settings, CONCEPTS))
    rng = random.Random(seed)
    lines: list[bytes] = []
    kills = Counter[int]()
    rounds = 0
    with ThreadPoolExecutor(2) as pool:
        # At least min_rounds rounds, and more (up to max_rounds) until each drainer was
        # killed min_kills times: whether a kill lands depends on the machine's timing.
        for round_number in range(max_rounds):
            if round_number >= min_rounds and min(kills[0], kills[1]) >= min_kills:
                break
            rounds += 1
            # Producers: fresh lines, each appended byte for byte to both queues (twins), a
            # few earlier lines again (another mention each), a malformed line now and then.
            fresh = []
            for _ in range(rng.randrange(20, 60)):
                n = len(lines)
                fresh.append(json.dumps({
                    "source": f"CONCEPT:c{rng.randrange(CONCEPTS)}",
                    "target": f"CONCEPT:c{rng.randrange(CONCEPTS)}",
                    "relationship": f"R{n}", "justification": f"line {n}",
                    "timestamp": n}).encode())
                lines.append(fresh[-1])
            for host in hosts:
                again = [rng.choice(lines) for _ in range(rng.randrange(0, 6))]
                host.append(fresh + again + ([MALFORMED] if rng.random() < 0.5 else []))
            # Both drainers at once, the second a random moment later (so that one's commits
            # land between the other's crash and its restart), each killed at a random point
            # or by us at a random moment.
            runs = []
            for i in rng.sample(range(2), 2):
                runs.append((i, pool.submit(_crash_child, hosts[i], rng.choice(KILL_POINTS),
                                        rng.randrange(1, 5), rng.uniform(2.0, 6.0))))
                time.sleep(rng.uniform(0.0, 2.0))
            for i, run in runs:
                kills[i] += run.result() == -signal.SIGKILL
    for host in hosts:
        for _ in range(3):
            _clean_tick(host)
        assert not host.settings.drain.lazy_edges_queue_path.exists()
        assert not host.settings.drain.draining_path.exists()
        assert drainer_id_path(host.settings.drain.lazy_edges_queue_path).exists()
    ids = {drainer_id_path(h.settings.drain.lazy_edges_queue_path).read_text() for h in hosts}
    assert len(ids) == 2  # two drainers, two identities

    mentions = asyncio.run(edge_mentions(url))
    expected = hosts[0].copies + hosts[1].copies
    dead_twice = not_malformed = dead_lettered = 0
    for host in hosts:
        records = [json.loads(raw) for raw in
                   host.settings.drain.dead_letter_path.read_bytes().splitlines()]
        dead_lettered += len(records)
        dead_twice += sum(n - 1 for n in Counter(r["readAt"] for r in records).values())
        not_malformed += sum(r["reason"] != "malformed" for r in records)
        not_malformed += abs(len(records) - host.malformed)
    return TwoDrainersOutcome(
        rounds=rounds, kills=(kills[0], kills[1]),
        lines_appended=sum(h.copies.total() + h.malformed for h in hosts),
        mentions_in_graph=sum(min(mentions[r], n) for r, n in expected.items()),
        dead_lettered=dead_lettered,
        applied_twice=sorted(r for r in expected if mentions[r] > expected[r]),
        lost=sorted(r for r in expected if mentions[r] < expected[r]),
        dead_lettered_twice=dead_twice, dead_letters_not_malformed=not_malformed)


def test_two_drainers_killed_at_random_points_count_every_mention_exactly_once(
    tmp_path: Path, postgres_server: PostgresServer,
) -> None:
    outcome = two_drainers_killed(tmp_path, postgres_server.create_database("drainers_per_host"))
    assert min(outcome.kills) >= MIN_KILLS, outcome.kills  # each drainer was killed several times
    assert outcome.applied_twice == [], outcome.applied_twice[:10]
    assert outcome.lost == [], outcome.lost[:10]
    assert outcome.dead_lettered_twice == 0
    assert outcome.dead_letters_not_malformed == 0  # exactly the malformed lines, once each
