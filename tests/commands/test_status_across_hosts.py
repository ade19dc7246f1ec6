"""`status` and `/metrics` beyond one machine, run as an operator runs them: two "hosts" (two
data folders, two queues, two embedded Chroma stores) on one real PostgreSQL (the session's),
the real `daemons.drain`, `daemons.reconcile` and `daemons.status` as subprocesses.

- every drainer's last tick and the queue figures it recorded show on either host (status
  text and `--json`; `/metrics` of a running drain daemon);
- status names the host leading the reconcile passes, the new leader after it stops, and
  nobody once no daemon runs; a reconcile daemon's `/metrics` says whether it leads and who.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from core.drain.stores.drainer_identity import drainer_id_path
from tests.postgres_server import PostgresServer
from tests.support import REPO, child_env, run_module

_databases = iter(range(1, 1_000_000))
#: Lines whose edge cannot be linked yet (their CONCEPT nodes do not exist): each tick puts
#: them back in the queue, so the queue a drainer records after its tick holds them.
UNLINKABLE = '{"source": "CONCEPT:a%d", "target": "CONCEPT:b%d", "relationship": "R"}\n'
INTERVAL_MS = 3_000


class Host:
    """A data folder of its own with a config naming the shared `stateUrl`."""

    def __init__(self, root: Path, name: str, state_url: str, **keys: Any) -> None:
        self.root = root / name
        self.root.mkdir(parents=True)
        lines = ["[knowledgeBase]", 'dataDir = "data"', 'logFormat = "json"',
                 f"stateUrl = {json.dumps(state_url)}"]
        lines += [f"{k} = {json.dumps(v)}" for k, v in keys.items()]
        self.config = self.root / "kb.toml"
        self.config.write_text("\n".join(lines) + "\n", encoding="utf-8")
        self.queue = self.root / "data/memory-core/lazy-edges.jsonl"
        self.log = self.root / "daemon.log"
        self.process: subprocess.Popen[bytes] | None = None

    def run(self, module: str, *args: str, stdin: str | None = None
            ) -> subprocess.CompletedProcess[str]:
        return run_module(module, *args, "--config", str(self.config), home=self.root / "home",
                          stdin=stdin)

    def status_json(self) -> dict[str, Any]:
        shown = self.run("daemons.status", "--json")
        assert shown.returncode == 0, shown.stderr
        report: dict[str, Any] = json.loads(shown.stdout)
        return report

    def status_text(self) -> str:
        shown = self.run("daemons.status")
        assert shown.returncode == 0, shown.stderr
        return shown.stdout

    def drainer_id(self) -> str:
        return drainer_id_path(self.queue).read_text(encoding="ascii").strip()

    def start(self, module: str) -> None:
        with self.log.open("wb") as sink:
            self.process = subprocess.Popen(
                [sys.executable, "-m", module, "--config", str(self.config)], cwd=REPO,
                env=child_env(self.root / "home"), stdout=subprocess.DEVNULL, stderr=sink)

    def logged(self, event: str) -> bool:
        for line in self.log.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("{") and json.loads(line).get("event") == event:
                return True
        return False

    def stop(self) -> None:
        """SIGTERM, as systemd stops it (a clean stop hands the lead over at once)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid


@pytest.fixture
def hosts(tmp_path: Path, postgres_server: PostgresServer) -> Iterator[Callable[..., Host]]:
    url = postgres_server.create_database(f"status_hosts{next(_databases)}")
    made: list[Host] = []

    def make(name: str, **keys: Any) -> Host:
        host = Host(tmp_path, name, url, **keys)
        made.append(host)
        return host

    yield make
    for host in made:
        host.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            text = answer.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return None
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _two_drainers_ticked(hosts: Callable[..., Host]) -> tuple[Host, Host]:
    """Host a: two lines that go back to its queue; host b: one malformed line (a dead
    letter). Each drains once with the real `--tick`."""
    a, b = hosts("a"), hosts("b")
    appended = a.run("daemons.enqueue", stdin=UNLINKABLE % (1, 1) + UNLINKABLE % (2, 2))
    assert appended.returncode == 0, appended.stderr
    b.queue.parent.mkdir(parents=True)
    b.queue.write_bytes(b"{not json\n")
    for host in (a, b):
        ticked = host.run("daemons.drain", "--tick", "--json")
        assert ticked.returncode == 0, ticked.stderr
    return a, b


def test_status_on_either_host_shows_both_drainers_last_ticks_and_queue_figures(
    hosts: Callable[..., Host],
) -> None:
    a, b = _two_drainers_ticked(hosts)
    ids = {a.drainer_id(): a, b.drainer_id(): b}
    assert len(ids) == 2

    for here in (a, b):
        report = here.status_json()
        drainers = {d["drainer"]: d for d in report["drainers"]}
        assert set(drainers) == set(ids), "every drainer of the database, on either host"
        for ident, host in ids.items():
            shown = drainers[ident]
            assert shown["local"] is (host is here)
            assert shown["host"] == socket.gethostname()
            assert shown["lastTick"]["ok"] is True
            assert isinstance(shown["lastTick"]["startedAt"], int)
        mine, theirs = drainers[a.drainer_id()], drainers[b.drainer_id()]
        assert mine["lastTick"]["figures"]["drain"]["requeued"] == 2
        assert (mine["queueLines"], mine["deadLetters"], mine["draining"]) == (2, 0, False)
        assert theirs["lastTick"]["figures"]["drain"]["deadLettered"] == 1
        assert (theirs["queueLines"], theirs["deadLetters"]) == (0, 1)
        # Existing keys stay: the one `drain` row is the last tick of any drainer (b's).
        assert report["ticks"]["drain"]["startedAt"] == theirs["lastTick"]["startedAt"]

        text = here.status_text()
        assert "Drainers" in text
        for ident in ids:
            assert ident[:12] in text
        assert text.count("(this host)") == 1
        assert "2 lines: 0 linked, 2 re-queued" in text and "1 dead-lettered" in text


def test_a_running_drain_daemon_s_metrics_show_every_drainer(
    hosts: Callable[..., Host],
) -> None:
    a, b = _two_drainers_ticked(hosts)
    port = free_port()
    c = hosts("c", metricsPort=port, remIntervalMs=INTERVAL_MS)
    c.start("daemons.drain")

    def every_drainer_shown() -> bool:
        assert c.process is not None and c.process.poll() is None, c.log.read_text()
        samples = scrape(port)
        if samples is None:
            return False
        shown = {dict(labels)["drainer"] for name, labels in samples
                 if name == "kb_drainer_last_tick_timestamp_seconds"}
        return shown >= {a.drainer_id(), b.drainer_id()} and drainer_id_path(c.queue).exists() \
            and c.drainer_id() in shown

    wait_until(every_drainer_shown, 60, "c's /metrics to show a's, b's and its own drainer")
    samples = scrape(port)
    assert samples is not None
    host = socket.gethostname()

    def gauge(name: str, drainer: str) -> float:
        return samples[(name, (("drainer", drainer), ("host", host)))]

    report = a.status_json()
    recorded = {d["drainer"]: d for d in report["drainers"]}
    for ident in (a.drainer_id(), b.drainer_id()):
        assert gauge("kb_drainer_last_tick_timestamp_seconds", ident) \
            == recorded[ident]["lastTick"]["finishedAt"] / 1000
        assert gauge("kb_drainer_last_tick_ok", ident) == 1
    assert gauge("kb_drainer_queue_lines", a.drainer_id()) == 2
    assert gauge("kb_drainer_dead_letters", b.drainer_id()) == 1
    assert gauge("kb_drainer_queue_lines", c.drainer_id()) == 0
    # No reconcile daemon in this process: it does not lead.
    assert samples[("kb_reconcile_is_leader", ())] == 0


def test_status_names_the_reconcile_leader_then_the_next_then_nobody(
    hosts: Callable[..., Host],
) -> None:
    keys = {"reconciliationEnabled": True, "reconciliationIntervalMs": INTERVAL_MS}
    a_port, b_port = free_port(), free_port()
    a = hosts("a", metricsPort=a_port, **keys)
    b = hosts("b", metricsPort=b_port, **keys)
    watcher = hosts("watcher")
    assert watcher.status_json()["leader"] == {"election": "postgresql", "holder": None}
    assert "Reconcile leader: nobody" in watcher.status_text()

    a.start("daemons.reconcile")
    wait_until(lambda: a.logged("leadership.acquired"), 60, "a to lead")
    b.start("daemons.reconcile")
    holder_a = f"kb-reconcile@{socket.gethostname()}:{a.pid}"

    def b_sees_a_lead() -> bool:
        samples = scrape(b_port)
        return samples is not None and samples.get(
            ("kb_reconcile_leader", (("holder", holder_a),))) == 1

    wait_until(b_sees_a_lead, 60, "b's /metrics to name a as the leader")
    b_samples, a_samples = scrape(b_port), scrape(a_port)
    assert b_samples is not None and a_samples is not None
    assert b_samples[("kb_reconcile_is_leader", ())] == 0
    assert a_samples[("kb_reconcile_is_leader", ())] == 1
    assert a_samples[("kb_reconcile_leader", (("holder", holder_a),))] == 1

    for here in (watcher, b):
        assert here.status_json()["leader"] == {"election": "postgresql", "holder": holder_a}
        assert f"Reconcile leader: {holder_a}" in here.status_text()

    a.stop()
    holder_b = f"kb-reconcile@{socket.gethostname()}:{b.pid}"
    wait_until(lambda: watcher.status_json()["leader"]["holder"] == holder_b, 60,
               "status to name b, the new leader")
    assert f"Reconcile leader: {holder_b}" in watcher.status_text()

    b.stop()
    assert watcher.status_json()["leader"] == {"election": "postgresql", "holder": None}
    assert "Reconcile leader: nobody" in watcher.status_text()


def test_a_drain_daemon_places_its_first_tick_by_its_own_drainer_not_another_host_s(
    hosts: Callable[..., Host],
) -> None:
    """Hosts a and b just ticked; host c's drain daemon, interval one hour, has never ticked: its
    first tick runs at once (b's tick says nothing of c's queue), not an hour after b's."""
    a, b = _two_drainers_ticked(hosts)
    c = hosts("c", remIntervalMs=3_600_000)
    appended = c.run("daemons.enqueue", stdin=UNLINKABLE % (3, 3))
    assert appended.returncode == 0, appended.stderr
    c.start("daemons.drain")
    wait_until(lambda: c.logged("tick.completed"), 60, "c's first tick")
    drainers = {d["drainer"]: d for d in a.status_json()["drainers"]}
    assert set(drainers) == {a.drainer_id(), b.drainer_id(), c.drainer_id()}
    assert drainers[c.drainer_id()]["queueLines"] == 1


def test_a_drainer_without_a_tick_for_its_intervals_is_shown_gone_and_can_be_forgotten(
    hosts: Callable[..., Host],
) -> None:
    """a and b ticked once. Judged by an hour's intervals they are not gone and forgetting one
    is refused; judged by 1 s intervals (host w's config, whose drain daemon serves /metrics)
    both soon are: status and /metrics say so, `kb-drain forget` removes b's row and series,
    and b's next tick shows it again."""
    a, b = _two_drainers_ticked(hosts)
    ids = {a.drainer_id(), b.drainer_id()}
    watcher = hosts("watcher")
    refused = watcher.run("daemons.drain", "forget", b.drainer_id()[:12])
    assert refused.returncode == 2, refused.stderr
    assert "is not gone" in refused.stderr and "drainerGoneIntervals" in refused.stderr
    assert not any(d["gone"] for d in watcher.status_json()["drainers"])

    port = free_port()
    w = hosts("w", metricsPort=port, remIntervalMs=1_000, drainerGoneIntervals=2)
    w.start("daemons.drain")
    host = socket.gethostname()

    def gone_series(samples: Samples | None) -> dict[str, float]:
        return {} if samples is None else {
            dict(labels)["drainer"]: value for (name, labels), value in samples.items()
            if name == "kb_drainer_gone" and dict(labels)["host"] == host}

    def a_and_b_gone() -> bool:
        assert w.process is not None and w.process.poll() is None, w.log.read_text()
        shown = gone_series(scrape(port))
        return all(shown.get(i) == 1 for i in ids)

    wait_until(a_and_b_gone, 60, "w's /metrics to show a and b gone")
    gone = {d["drainer"]: d["gone"] for d in w.status_json()["drainers"]}
    assert {i: gone[i] for i in ids} == dict.fromkeys(ids, True)
    text = w.status_text()
    assert f"{b.drainer_id()[:12]} (gone)" in text and "kb-drain forget DRAINER" in text

    forgot = w.run("daemons.drain", "forget", b.drainer_id()[:12], "--json")
    assert forgot.returncode == 0, forgot.stderr
    assert json.loads(forgot.stdout)["drainer"] == b.drainer_id()
    assert b.drainer_id() not in {d["drainer"] for d in watcher.status_json()["drainers"]}
    wait_until(lambda: b.drainer_id() not in gone_series(scrape(port))
               and a.drainer_id() in gone_series(scrape(port)), 60,
               "w's /metrics to drop b's series and keep a's")
    again = w.run("daemons.drain", "forget", b.drainer_id())
    assert again.returncode == 2 and "no drainer" in again.stderr, again.stderr

    back = b.run("daemons.drain", "--tick")
    assert back.returncode == 0, back.stderr
    shown = {d["drainer"]: d for d in watcher.status_json()["drainers"]}
    assert b.drainer_id() in shown and shown[b.drainer_id()]["gone"] is False


def test_forget_on_a_sqlite_state_is_refused_as_it_has_one_drainer(tmp_path: Path) -> None:
    config = tmp_path / "kb.toml"
    config.write_text('[knowledgeBase]\ndataDir = "data"\n', encoding="utf-8")
    refused = run_module("daemons.drain", "forget", "(single)", "--json", "--config",
                         str(config), home=tmp_path / "home")
    assert refused.returncode == 2, refused.stderr
    assert "one drainer" in refused.stderr
    assert json.loads(refused.stdout)["ok"] is False
    assert not (tmp_path / "data").exists(), "a refused forget creates nothing"
