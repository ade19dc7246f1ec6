"""Quick versions of the reliability suite's crash and concurrency runs (the long ones:
`make test-reliability`)."""

from __future__ import annotations

from pathlib import Path

import pytest

import core.drain as drain
import core.drain.batches as drain_batches
import core.drain.queue_drain as drain_tick
from tests.reliability.crash_child import POINTS, TARGETS
from tests.reliability.harness import (
    crash_trials,
    points_never_killed,
    producers_and_drainer,
    two_drainers_at_once,
)
from tests.reliability.reconcile_safety import reconcile_trials
from tests.support import patch_target


@pytest.mark.parametrize("point", list(TARGETS))
def test_every_crash_point_wraps_a_function_where_the_drain_looks_it_up(point: str) -> None:
    owner, name, _ = TARGETS[point]
    assert callable(patch_target(owner, name))


def test_a_patch_of_a_module_that_does_not_read_the_name_is_refused() -> None:
    # The package only re-exports `drain_queue`; the batches no longer read the batch size.
    with pytest.raises(AssertionError, match="would have no effect"):
        patch_target(drain, "drain_queue")
    with pytest.raises(AssertionError, match="would have no effect"):
        patch_target(drain_batches, "DRAIN_BATCH_LINES")
    assert patch_target(drain_tick, "DRAIN_BATCH_LINES") == drain_tick.DRAIN_BATCH_LINES


def test_sigkill_at_every_point_of_a_drain_loses_nothing_and_applies_nothing_twice(
    tmp_path: Path,
) -> None:
    named_points = len(POINTS) - 1
    result, outcomes = crash_trials(tmp_path, trials=named_points + 3, lines_per_trial=120)
    assert result.ok, result
    assert result.pending == 0
    assert result.in_graph + result.dead_lettered + result.malformed_dead == result.appended
    assert {key.split(":")[0] for key in outcomes} >= set(TARGETS), "every point tried"
    assert points_never_killed(outcomes) == [], outcomes


def test_sigkill_at_every_point_of_a_drain_on_a_neo_graph_loses_nothing_and_applies_nothing_twice(
    tmp_path: Path,
) -> None:
    # The original's Edges have no UNIQUE key and the weight lives in the document: every
    # mention (byte-identical repeats included) must still count once through kill -9.
    named_points = len(POINTS) - 1
    result, outcomes = crash_trials(tmp_path, trials=named_points, lines_per_trial=60,
                                    neo=True)
    assert result.ok, result
    assert result.pending == 0 and result.repeats_appended > 0
    assert result.in_graph + result.dead_lettered + result.malformed_dead == result.appended
    assert points_never_killed(outcomes) == [], outcomes


def test_producers_with_and_without_the_lock_lose_nothing_while_the_daemon_drains(
    tmp_path: Path,
) -> None:
    result = producers_and_drainer(tmp_path, producers=4, lines_each=400)
    assert result.ok, result
    assert result.in_graph == result.appended == 4 * (400 + 58), "every seventh line twice"


def test_randomized_reconciliation_deletes_only_the_plan_and_restores_exactly(
    tmp_path: Path,
) -> None:
    figures = reconcile_trials(tmp_path, trials=6)
    assert figures.trials == 6 and figures.deleted > 0
    assert figures.deleted_outside_plan == 0 and figures.over_cap == 0
    assert figures.not_restored_exactly == 0


def test_two_drainers_started_together_one_works_the_other_is_refused(tmp_path: Path) -> None:
    codes, errors, result = two_drainers_at_once(tmp_path, lines=3000)
    assert sorted(codes) in ([0, 0], [0, 1])
    for code, error in zip(codes, errors, strict=True):
        if code == 1:
            assert "held by pid" in error.splitlines()[-1]
    assert result.ok, result
