"""`/metrics` agrees with `kb-status`: a pass run with `--tick` beside the running daemon shows
in the daemon's scrape within its follow interval (last success, tombstones, tenant gauges),
every series the rules use exists from the first scrape of a folder with no dead letter, and
on SQLite the process running kb-reconcile shows as the leader.

One real daemon (`python -m daemons`, hour-long intervals, metrics on a free loopback port) on
a seeded embedded store; the beside-pass is a real `python -m daemons.reconcile --tick`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from core.base.runtime.config_file import load_config
from core.suite.metrics_reads import FOLLOW_INTERVAL_S
from tests.runtime.test_monitoring import (
    Samples,
    _daemon,
    _recorded,
    _scrape_once,
    _stop,
    free_port,
    wait_for,
)
from tests.support import REPO, child_env, seed_acme_drift


def _samples(port: int) -> Samples | None:
    text = _scrape_once(port)
    if text is None:
        return None
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _command(config: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args, "--config", str(config)], cwd=REPO,
                          env=child_env(home), capture_output=True, text=True, timeout=120,
                          check=False)


def test_a_pass_run_beside_the_daemon_shows_in_its_metrics_within_the_follow_interval(
    tmp_path: Path,
) -> None:
    port = free_port()
    config = tmp_path / "kb.toml"
    config.write_text('[knowledgeBase]\ndataDir = "data"\nlogFormat = "json"\n'
                      "reconciliationEnabled = true\nreconciliationAutoTombstone = true\n"
                      f"metricsPort = {port}\n")
    asyncio.run(seed_acme_drift(load_config(str(config)).settings))
    home = tmp_path / "home"
    exempt = _command(config, home, "daemons.tenants", "set-policy", "acme",
                      "--auto-tombstone", "off")
    assert exempt.returncode == 0, exempt.stderr[-2000:]
    daemon = _daemon(config, home)
    try:
        wait_for(lambda: "reconcile" in _recorded(tmp_path / "data/graph.sqlite")
                 or daemon.poll() is not None, timeout=90)
        before = _samples(port)
        assert before is not None and daemon.poll() is None
        success = ("kb_last_success_timestamp_seconds", (("job", "reconcile"),))
        tombstoned = ("kb_tombstoned_chunks_total", (("tenant", "acme"),))
        # No dead letter yet, and the series the dead-letter rule sums is there at 0.
        assert before[("kb_dead_letters", (("reason", ""),))] == 0
        leaders = {labels: v for (name, labels), v in before.items()
                   if name == "kb_reconcile_leader"}
        assert list(leaders.values()) == [1] and \
            dict(next(iter(leaders)))["holder"].startswith("kb-reconcile@")
        assert before[("kb_reconcile_is_leader", ())] == 1
        assert before[tombstoned] == 0, "the daemon's own pass deletes nothing (acme exempt)"

        policy = _command(config, home, "daemons.tenants", "set-policy", "acme",
                          "--auto-tombstone", "inherit")
        assert policy.returncode == 0, policy.stderr[-2000:]
        beside = _command(config, home, "daemons.reconcile", "--tick", "--json")
        assert beside.returncode == 0, beside.stderr[-2000:]
        figures = json.loads(beside.stdout)["tenants"][0]
        assert (figures["tenantId"], figures["tombstonedCount"]) == ("acme", 2)

        def followed() -> bool:
            after = _samples(port)
            return after is not None and after[tombstoned] == 2 and \
                after[success] > before[success]

        wait_for(followed, timeout=FOLLOW_INTERVAL_S * 2 + 10)
        assert daemon.poll() is None
        after = _samples(port)
        assert after is not None
        assert after[("kb_stale_chunks", (("tenant", "acme"),))] == figures["staleCount"] == 3
    finally:
        _stop(daemon)
