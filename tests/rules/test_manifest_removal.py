"""`core.reconcile.rules.manifest_removal`: the `manifests` map a removal writes, with the
other repos' entries (usable or not) kept as stored."""

from __future__ import annotations

from typing import Any

from core.reconcile.rules.manifest_removal import (
    removable_repos,
    stored_manifests,
    without_manifest,
    without_snapshot,
)

SNAPSHOT: dict[str, Any] = {"yieldedSourcePaths": ["a.md"], "extractionIdentity": "ab" * 32,
                            "updatedAt": 2}
STORED: dict[str, Any] = {"tenantId": "hooli", "manifests": {
    "hooli/search": {"repoSlug": "hooli/search", "pathsAfterPush": ["a.md"], "updatedAt": 1,
                     "extractionSnapshot": SNAPSHOT},
    "hooli/serch": {"repoSlug": "hooli/serch", "pathsAfterPush": ["a.md"], "updatedAt": 1},
    "broken": "not an entry"}}


def test_a_removed_manifest_leaves_the_other_entries_as_stored() -> None:
    assert without_manifest(STORED, "hooli/serch") == {
        "hooli/search": STORED["manifests"]["hooli/search"], "broken": "not an entry"}
    assert "hooli/serch" in STORED["manifests"], "the stored properties are not changed"


def test_a_removed_snapshot_keeps_its_manifest() -> None:
    kept = without_snapshot(STORED, "hooli/search")
    assert kept is not None
    assert kept["hooli/search"] == {"repoSlug": "hooli/search", "pathsAfterPush": ["a.md"],
                                    "updatedAt": 1}
    assert kept["hooli/serch"] == STORED["manifests"]["hooli/serch"]


def test_nothing_to_remove_is_none_and_names_what_could_go() -> None:
    assert without_manifest(STORED, "nope") is None
    assert without_snapshot(STORED, "hooli/serch") is None
    assert without_snapshot(STORED, "broken") is None
    assert without_manifest({}, "x") is None and without_manifest("junk", "x") is None
    assert stored_manifests({"manifests": []}) == {}
    assert removable_repos(STORED, snapshot_only=False) == ("broken", "hooli/search",
                                                            "hooli/serch")
    assert removable_repos(STORED, snapshot_only=True) == ("hooli/search",)
