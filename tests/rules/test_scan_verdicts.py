"""The row-by-row verdict the pass and `explain` share (`core.reconcile.rules.scan_verdicts`): each
row
of the tenant gets one verdict with its reasons, actionable or not, held or not."""

from __future__ import annotations

from typing import Any

import pytest

from core.reconcile.rules.manifests import RepoManifest
from core.reconcile.rules.scan_verdicts import ScanRules, judge_row

RULES = ScanRules("t", 5, 2, {"r": RepoManifest("r", ("keep.md",), 1_000)}, 0,
                  read_ms=2_000, max_stale_fraction=1.0)


@pytest.mark.parametrize(("metadata", "expected"), [
    ({"tenantConfigVersion": 5, "sourcePath": "keep.md"}, None),
    ({"tenantConfigVersion": 4, "sourcePath": "keep.md"}, ("config-stale", False, False)),
    ({"tenantConfigVersion": 3, "sourcePath": "keep.md"}, ("config-stale", True, False)),
    ({"tenantConfigVersion": 5, "sourcePath": "gone.md"}, ("manifest-orphan", True, False)),
    ({"tenantConfigVersion": 1, "sourcePath": "gone.md"},
     ("config-stale+manifest-orphan", True, False)),
    ({"tenantConfigVersion": 5, "sourcePath": "gone.md", "ingestedAt": 1_500}, None),
    # A string ingestedAt is legacy: deleted by id (issue 25), not held; a boolean is held.
    ({"tenantConfigVersion": 3, "sourcePath": "keep.md", "ingestedAt": "x"},
     ("config-stale", True, False)),
    ({"tenantConfigVersion": 3, "sourcePath": "keep.md", "ingestedAt": True},
     ("config-stale", True, True)),
    ({"tenantConfigVersion": 3, "sourcePath": "keep.md", "tenantId": "other"}, None),
])
def test_each_row_gets_one_verdict_with_its_reasons(metadata: dict[str, Any],
                                                     expected: Any) -> None:
    verdict = judge_row("c", {"tenantId": "t", "repoSlug": "r", "ingestedAt": 900, **metadata},
                        RULES)
    if expected is None:
        assert verdict is None
    else:
        assert verdict is not None
        assert ("+".join(verdict.reasons), verdict.actionable, verdict.held) == expected
