"""Monitoring as an operator meets it: a restarted daemon's first scrape carries the recorded
state, and the shipped alert rules and dashboard use only series a real daemon exports.

One real daemon (`python -m daemons`, hour-long intervals, metrics on a free loopback port)
runs a first time until both jobs ticked over a seeded store, is stopped, and is started again;
its /metrics is scraped as soon as it answers, long before its next tick is due.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from core.base.chroma import VectorStore
from core.base.rules.tenants import TENANT_CONFIG_LABEL
from core.base.runtime.config_file import load_config
from core.base.state.graph import upsert_node
from core.base.state.state import open_graph
from tests.support import REPO, child_env, seed

RULES = REPO / "deploy/prometheus/kb-rules.yml"
#: promtool's unit tests of the rules: each alert fires on the series that should fire it.
RULES_TESTS = REPO / "deploy/prometheus/kb-rules.test.yml"
SCRAPE_CONFIG = REPO / "deploy/prometheus/scrape.yml"
DASHBOARD = REPO / "deploy/grafana/kb-daemons.json"
#: A metric name as PromQL writes it: the daemons' own and the library's process metrics.
METRIC_NAME = re.compile(r"\b(?:kb|process)_[a-z0-9_]+\b")

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass(frozen=True)
class Restarted:
    """What the restarted daemon served at once, and what SQLite recorded before it."""

    text: str
    samples: Samples
    recorded: dict[str, tuple[bool, int, dict[str, Any]]]
    log_events: list[str]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(predicate: Callable[[], object], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


async def _seed(config: Path) -> None:
    """Tenant `acme` (version 4: two actionable stale chunks out of four, so they are
    tombstoned) and tenant `held` (version 3: every chunk actionable, so the stale-fraction
    guard holds it)."""
    settings = load_config(str(config)).settings
    graph = await open_graph(settings.state)
    try:
        await upsert_node(graph, "kb-config:acme", TENANT_CONFIG_LABEL,
                          {"version": 4, "repoSlug": "acme/repo"})
        await upsert_node(graph, "kb-config:held", TENANT_CONFIG_LABEL,
                          {"version": 3, "repoSlug": "held/repo"})
    finally:
        await graph.close()
    vectors = await VectorStore.open(settings.chroma)
    try:
        await seed(vectors, settings.chroma.knowledge_base_collection, [
            *((i, {"tenantId": "acme", "tenantConfigVersion": v, "ingestedAt": 1_000 + v})
              for i, v in (("a1", 1), ("a2", 2), ("a3", 3), ("a4", 4))),
            *((i, {"tenantId": "held", "tenantConfigVersion": 1, "ingestedAt": 1_000})
              for i in ("h1", "h2")),
        ])
    finally:
        await vectors.close()
    # A malformed queue line: the drain dead-letters it, so `kb_dead_letters` has a sample.
    settings.drain.lazy_edges_queue_path.parent.mkdir(parents=True, exist_ok=True)
    settings.drain.lazy_edges_queue_path.write_text("not json\n")


def _recorded(graph_path: Path) -> dict[str, tuple[bool, int, dict[str, Any]]]:
    if not graph_path.exists():
        return {}
    db = sqlite3.connect(f"file:{graph_path}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT daemon, ok, finished_at, figures FROM daemon_ticks").fetchall()
    except sqlite3.OperationalError:
        return {}
    finally:
        db.close()
    return {r[0]: (bool(r[1]), int(r[2]), json.loads(r[3])) for r in rows}


def _daemon(config: Path, home: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "daemons", "--config", str(config)],
                            cwd=REPO, env=child_env(home), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def _stop(daemon: subprocess.Popen[bytes]) -> list[dict[str, Any]]:
    daemon.send_signal(signal.SIGINT)
    _, err = daemon.communicate(timeout=60)
    assert daemon.returncode == 0, err.decode()[-2000:]
    return [json.loads(x) for x in err.decode().splitlines() if x.startswith("{")]


def _scrape_once(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            return str(answer.read().decode())
    except (urllib.error.URLError, ConnectionError):
        return None


@pytest.fixture(scope="module")
def restarted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Restarted]:
    tmp = tmp_path_factory.mktemp("monitoring")
    port = free_port()
    config = tmp / "kb.toml"
    config.write_text('[knowledgeBase]\ndataDir = "data"\nlogFormat = "json"\n'
                      "reconciliationEnabled = true\nreconciliationAutoTombstone = true\n"
                      f"metricsPort = {port}\n")
    asyncio.run(_seed(config))
    graph_path = tmp / "data/graph.sqlite"

    first = _daemon(config, tmp / "home")
    try:
        wait_for(lambda: set(_recorded(graph_path)) >= {"drain", "reconcile"}
                 or first.poll() is not None, timeout=90)
    finally:
        _stop(first)
    recorded = _recorded(graph_path)

    second = _daemon(config, tmp / "home")
    text: str | None = None
    try:
        def answered() -> bool:
            nonlocal text
            assert second.poll() is None, "the restarted daemon exited"
            text = _scrape_once(port)
            return text is not None

        wait_for(answered, timeout=60)
    finally:
        events = _stop(second)
    assert text is not None
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    yield Restarted(text, samples, recorded, [e["event"] for e in events])


def test_a_restarted_daemon_serves_the_recorded_state_before_any_tick(
    restarted: Restarted,
) -> None:
    samples, recorded = restarted.samples, restarted.recorded
    assert set(recorded) == {"drain", "reconcile"}
    assert all(ok for ok, _, _ in recorded.values()), recorded

    ticks = {k: v for k, v in samples.items() if k[0] == "kb_ticks_total"}
    assert ticks and set(ticks.values()) == {0.0}, "scraped before any tick of this start"
    assert "tick.completed" not in restarted.log_events, "no tick ran in the restarted daemon"

    for job, (_ok, finished_at, _figures) in recorded.items():
        assert samples[("kb_last_success_timestamp_seconds", (("job", job),))] \
            == finished_at / 1000, f"{job}: the recorded last success"
        assert samples[("kb_job_interval_seconds", (("job", job),))] == 3600
        assert samples[("kb_tick_in_progress", (("job", job),))] == 0

    tenants = {t["tenantId"]: t for t in recorded["reconcile"][2]["tenants"]}
    assert set(tenants) == {"acme", "held"}
    assert tenants["acme"]["tombstonedCount"] == 2 and tenants["held"]["guard"], \
        "the first pass tombstoned acme's actionable chunks and a guard held tenant held"
    for name, t in tenants.items():
        label = (("tenant", name),)
        assert samples[("kb_stale_chunks", label)] == t["staleCount"]
        assert samples[("kb_manifest_orphan_chunks", label)] == t["manifestOrphanCount"]
        assert samples[("kb_orphan_chunks", label)] == t["totalOrphanCount"]
        assert samples[("kb_missing_paths", label)] == t["missingPathCount"]
        guard = t["guard"] or ""
        assert samples[("kb_tenant_held", (("guard", guard), ("tenant", name)))] \
            == (1 if guard else 0)
        # Counters start at 0 at every start (README, Monitoring): the series exists at once.
        assert samples[("kb_tombstoned_chunks_total", label)] == 0
    assert samples[("kb_stale_chunks", (("tenant", "acme"),))] == 3
    assert samples[("kb_tenant_held", (("guard", "stale-fraction"), ("tenant", "held")))] == 1


def _rule_expressions() -> list[str]:
    return [rule["expr"] for group in yaml.safe_load(RULES.read_text())["groups"]
            for rule in group["rules"]]


def _dashboard_expressions() -> list[str]:
    def targets(panels: list[dict[str, Any]]) -> Iterator[str]:
        for panel in panels:
            yield from (t["expr"] for t in panel.get("targets", []))
            yield from targets(panel.get("panels", []))

    return list(targets(json.loads(DASHBOARD.read_text())["panels"]))


@pytest.mark.parametrize("source", ["rules", "dashboard"])
def test_every_series_the_rules_and_the_dashboard_use_is_in_a_real_scrape(
    restarted: Restarted, source: str,
) -> None:
    expressions = _rule_expressions() if source == "rules" else _dashboard_expressions()
    used = {name for expr in expressions for name in METRIC_NAME.findall(expr)}
    scraped = {name for name, _ in restarted.samples}
    assert used, f"the {source} name no metric"
    assert used <= scraped, f"the {source} use series a daemon does not export: " \
        f"{sorted(used - scraped)}"


def test_the_dashboard_shows_every_series_a_daemon_exports(restarted: Restarted) -> None:
    used = {name for expr in _dashboard_expressions() for name in METRIC_NAME.findall(expr)}
    # `<counter>_created` is the library's companion of a counter or histogram (when its
    # series was created), not a series of its own to chart.
    families = {family.name: {s.name for s in family.samples}
                for family in text_string_to_metric_families(restarted.text)
                if family.name.startswith("kb_") and not family.name.endswith("_created")}
    assert families
    unshown = sorted(name for name, sample_names in families.items()
                     if not sample_names & used)
    assert not unshown, f"exported but not on the dashboard: {unshown}"


#: Prometheus's rule format (https://prometheus.io/docs/prometheus/latest/configuration/
#: alerting_rules/): the keys a group and an alerting rule may have.
GROUP_KEYS = {"name", "interval", "limit", "rules"}
ALERT_KEYS = {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}
DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")


def test_the_rules_file_has_prometheus_s_rule_format() -> None:
    document = yaml.safe_load(RULES.read_text())
    assert set(document) == {"groups"}
    names = [group["name"] for group in document["groups"]]
    assert len(names) == len(set(names)), "group names are unique"
    alerts = set()
    for group in document["groups"]:
        assert set(group) <= GROUP_KEYS and isinstance(group["rules"], list)
        for rule in group["rules"]:
            assert set(rule) <= ALERT_KEYS and {"alert", "expr"} <= set(rule), rule
            assert isinstance(rule["alert"], str) and re.fullmatch(r"[A-Za-z_]\w*",
                                                                   rule["alert"])
            assert isinstance(rule["expr"], str) and rule["expr"].strip()
            assert DURATION.match(str(rule.get("for", "0s"))), rule.get("for")
            for mapping in ("labels", "annotations"):
                assert all(isinstance(k, str) and isinstance(v, str)
                           for k, v in rule.get(mapping, {}).items()), (rule["alert"], mapping)
            alerts.add(rule["alert"])
    assert alerts == {"KbNoSuccessfulTick", "KbDeadLettersGrowing", "KbDrainingLeftBehind",
                      "KbPersistentDrift", "KbTenantHeldByGuard", "KbTicksInterrupted",
                      "KbNoReconcileLeader"}


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
@pytest.mark.parametrize("command", [["check", "rules", str(RULES)],
                                     ["check", "config", str(SCRAPE_CONFIG)],
                                     ["test", "rules", str(RULES_TESTS)]])
def test_promtool_accepts_the_shipped_prometheus_files(command: list[str]) -> None:
    checked = subprocess.run(["promtool", *command], capture_output=True, text=True,
                             timeout=60, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_operating_guide_s_metric_table_names_every_series_a_daemon_exports(
    restarted: Restarted,
) -> None:
    readme = (REPO / "docs" / "operating.md").read_text()
    for family in text_string_to_metric_families(restarted.text):
        if family.name.startswith("kb_") and not family.name.endswith("_created"):
            shown = {family.name, *(s.name for s in family.samples)}
            assert any(f"| `{name}` |" in readme for name in shown), family.name
