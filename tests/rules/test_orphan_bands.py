"""How a repo's manifest orphans are deleted (`core.reconcile.rules.orphan_bands`): each band names
the chosen ids and exactly their paths, never more than one `$in` takes, and a fetched row goes
only if the orphan rule still holds."""

from __future__ import annotations

from core.reconcile.rules.manifests import RepoManifest
from core.reconcile.rules.orphan_bands import PATHS_PER_BAND, orphan_bands, orphan_rule
from core.reconcile.rules.tombstone_bands import predicate_where


def test_orphan_bands_name_their_ids_and_exactly_their_own_chunks_paths() -> None:
    chunks = [(1, "i1", "a"), (1, "i2", "b"), (2, "i3", "a"), (3, "i4", "c"), (4, "i5", "d")]
    bands = orphan_bands(chunks, band_rows=3)
    assert [(b.ids, b.through, b.extra) for b in bands] == [
        (("i1", "i2", "i3"), 2, ({"ingestedAt": {"$lte": 2}}, {"ingestedAt": {"$gte": 1}},
                                 {"sourcePath": {"$in": ["a", "b"]}})),
        (("i4", "i5"), 4, ({"ingestedAt": {"$lte": 4}}, {"ingestedAt": {"$gte": 3}},
                           {"sourcePath": {"$in": ["c", "d"]}}))]
    manifest = RepoManifest("r", ("keep",), 10)
    assert predicate_where(({"tenantId": "t"},), bands[1]) == {"$and": [
        {"tenantId": "t"}, {"ingestedAt": {"$lte": 4}}, {"ingestedAt": {"$gte": 3}},
        {"sourcePath": {"$in": ["c", "d"]}}]}
    rule = orphan_rule("t", manifest)
    assert rule({"tenantId": "t", "repoSlug": "r", "sourcePath": "x", "ingestedAt": 5})
    assert not rule({"tenantId": "t", "repoSlug": "r", "sourcePath": "x", "ingestedAt": 11})
    assert not rule({"tenantId": "t", "repoSlug": "r", "sourcePath": "keep", "ingestedAt": 5})
    assert not rule({"tenantId": "u", "repoSlug": "r", "sourcePath": "x", "ingestedAt": 5})


def test_a_band_never_names_more_paths_than_one_in_takes() -> None:
    chunks = [(i, f"id{i}", f"p{i}") for i in range(PATHS_PER_BAND * 2 + 3)]
    bands = orphan_bands(chunks, band_rows=PATHS_PER_BAND * 10)
    assert max(len(b.extra[2]["sourcePath"]["$in"]) for b in bands) == PATHS_PER_BAND
    assert sum(b.planned for b in bands) == len(chunks)
    assert [i for b in bands for i in b.ids] == [c[1] for c in chunks]
