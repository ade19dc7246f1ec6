"""How a repo's manifest orphans are deleted (`core.rules.orphan_bands`): each band names exactly
its own chunks' paths, never more than one `$in` takes, and a fetched row goes only if the
orphan rule still holds."""

from __future__ import annotations

from core.rules.manifests import RepoManifest
from core.rules.orphan_bands import PATHS_PER_BAND, orphan_bands, orphan_rule
from core.rules.tombstone_bands import predicate_where


def test_orphan_bands_name_exactly_their_own_chunks_paths() -> None:
    pairs = [(1, "a"), (1, "b"), (2, "a"), (3, "c"), (4, "d")]
    bands = orphan_bands(pairs, band_rows=3)
    assert [(b.after, b.through, b.extra) for b in bands] == [
        (None, 2, ({"sourcePath": {"$in": ["a", "b"]}},)),
        (2, 4, ({"sourcePath": {"$in": ["c", "d"]}},))]
    manifest = RepoManifest("r", ("keep",), 10)
    assert predicate_where(({"tenantId": "t"},), bands[1]) == {"$and": [
        {"tenantId": "t"}, {"sourcePath": {"$in": ["c", "d"]}}, {"ingestedAt": {"$gt": 2}},
        {"ingestedAt": {"$lte": 4}}]}
    rule = orphan_rule("t", manifest)
    assert rule({"tenantId": "t", "repoSlug": "r", "sourcePath": "x", "ingestedAt": 5})
    assert not rule({"tenantId": "t", "repoSlug": "r", "sourcePath": "x", "ingestedAt": 11})
    assert not rule({"tenantId": "t", "repoSlug": "r", "sourcePath": "keep", "ingestedAt": 5})
    assert not rule({"tenantId": "u", "repoSlug": "r", "sourcePath": "x", "ingestedAt": 5})


def test_a_band_never_names_more_paths_than_one_in_takes() -> None:
    pairs = [(i, f"p{i}") for i in range(PATHS_PER_BAND * 2 + 3)]
    bands = orphan_bands(pairs, band_rows=PATHS_PER_BAND * 10)
    assert max(len(b.extra[0]["sourcePath"]["$in"]) for b in bands) == PATHS_PER_BAND
    assert sum(b.planned for b in bands) == len(pairs)
