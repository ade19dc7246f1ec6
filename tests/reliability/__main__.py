"""`python -m tests.reliability [--quick]` (`make test-reliability`): the long reliability runs
and their table. Exit 1 unless nothing was lost, nothing was deleted outside the plan, and a
crash child died at every named crash point."""

from __future__ import annotations

import json
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from core.base.runtime.logs import configure_logging
from core.base.runtime.process import restrict_umask
from tests.postgres_server import PostgresServer
from tests.reliability.harness import crash_trials, points_never_killed, producers_and_drainer
from tests.reliability.reconcile_safety import reconcile_trials
from tests.reliability.test_drainers_per_host import two_drainers_killed
from tests.reliability.test_store_restarts import daemon_through_restarts

LONG = {"crash_trials": 60, "lines_per_trial": 400, "producers": 4, "lines_each": 5000,
        "reconcile_trials": 40, "drainer_kills": 30, "state_restarts": 16}
QUICK = {"crash_trials": 8, "lines_per_trial": 100, "producers": 4, "lines_each": 300,
         "reconcile_trials": 5, "drainer_kills": 3, "state_restarts": 2}


def main(argv: list[str]) -> int:
    sizes = QUICK if "--quick" in argv else LONG
    # Under the umask every command sets, as the suite runs (tests/conftest.py): a folder the
    # runs make by hand (a host's data folder, a queue) is owner-only, as the commands require.
    restrict_umask()
    configure_logging("json")
    logging.getLogger().setLevel(logging.ERROR)
    root = Path(tempfile.mkdtemp(prefix="kb-reliability-"))
    rows: list[dict[str, Any]] = []
    try:
        started = time.monotonic()
        crash, outcomes = crash_trials(root / "crash", trials=sizes["crash_trials"],
                                       lines_per_trial=sizes["lines_per_trial"])
        rows.append({"run": "crash (SIGKILL)", "trials": sizes["crash_trials"], **crash.row(),
                     "seconds": round(time.monotonic() - started, 1)})
        started = time.monotonic()
        neo_crash, neo_outcomes = crash_trials(root / "crash-neo",
                                               trials=sizes["crash_trials"],
                                               lines_per_trial=sizes["lines_per_trial"],
                                               neo=True)
        rows.append({"run": "crash (SIGKILL), neo.mjs graph", "trials": sizes["crash_trials"],
                     **neo_crash.row(), "seconds": round(time.monotonic() - started, 1)})
        started = time.monotonic()
        concurrent = producers_and_drainer(root / "concurrency", producers=sizes["producers"],
                                           lines_each=sizes["lines_each"])
        rows.append({"run": f"{sizes['producers']} producers + daemon", "trials": 1,
                     **concurrent.row(), "seconds": round(time.monotonic() - started, 1)})
        started = time.monotonic()
        kills = sizes["drainer_kills"]
        postgres = PostgresServer()
        postgres.start()
        try:
            drainers = two_drainers_killed(
                root / "drainers", postgres.create_database("drainers"), min_kills=kills,
                max_rounds=kills * 3)
        finally:
            postgres.stop()
        rows.append({"run": f"2 drainers, 1 PostgreSQL (kills {drainers.kills[0]}"
                            f"+{drainers.kills[1]})", "trials": drainers.rounds,
                     **drainers.row(), "seconds": round(time.monotonic() - started, 1)})
        started = time.monotonic()
        postgres = PostgresServer()
        postgres.start()
        try:
            restarts = daemon_through_restarts(
                root / "restarts", postgres, postgres.create_database("restarts"),
                restarts=sizes["state_restarts"])
        finally:
            postgres.stop()
        rows.append({"run": f"drain daemon, PostgreSQL restarted {restarts.restarts} times "
                            f"({restarts.cut_short} ticks cut short)", "trials": 1,
                     **restarts.row(), "seconds": round(time.monotonic() - started, 1)})
        started = time.monotonic()
        safety = reconcile_trials(root / "reconcile", trials=sizes["reconcile_trials"])
        rows.append({"run": "reconcile safety", "trials": safety.trials, **safety.row(),
                     "seconds": round(time.monotonic() - started, 1)})
    finally:
        shutil.rmtree(root, ignore_errors=True)

    columns = ["run", "trials", "linesAppended", "byteIdenticalRepeats", "linesInGraph",
               "linesDeadLettered", "linesLost", "appliedTwice", "deadLetteredTwice",
               "chunksDeleted", "chunksDeletedOutsidePlan", "seconds"]
    widths = {c: max(len(c), *(len(str(r.get(c, "-"))) for r in rows)) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for row in rows:
        print("  ".join(str(row.get(c, "-")).ljust(widths[c]) for c in columns))
    never_killed = points_never_killed(outcomes) + points_never_killed(neo_outcomes)
    ok = crash.ok and neo_crash.ok and not never_killed and concurrent.ok and drainers.ok \
        and restarts.ok \
        and min(drainers.kills) >= kills and not safety.deleted_outside_plan \
        and not safety.over_cap and not safety.not_restored_exactly
    print(json.dumps({"ok": ok, "crashOutcomes": dict(outcomes),
                      "crashPointsNeverKilled": never_killed, "runs": rows}))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
