"""The one deletion order and the bands that carry it (issue 31): `TenantTally.first_to_go`
takes every reason's chunks in one order (oldest `ingestedAt`, a legacy chunk at its ISO time
or first without one, then the id), `id_bands` name exactly the chosen ids, `content_digests`
tells a rewritten row from the one read, and a withdrawn archive line names what was archived
but not deleted."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.base.rules.rows import ChromaRow, ColumnPage, content_digests
from core.reconcile.rules.archives.format import (
    ArchiveHeader,
    unseal,
    withdrawn_ids,
    withdrawn_line,
)
from core.reconcile.rules.manifests import RepoManifest
from core.reconcile.rules.scan_verdicts import ScanRules
from core.reconcile.rules.tenant_scan import TenantTally
from core.reconcile.rules.tombstone_bands import id_bands, legacy_order


def tally(cap: int) -> TenantTally:
    manifests = {"r": RepoManifest("r", ("keep.md",), 1_000)}
    scan = TenantTally(ScanRules("t", 5, 2, manifests, 0, read_ms=2_000,
                                 max_stale_fraction=1.0), cap=cap, keep_rows=True)
    rows = [("stale-b", "keep.md", 1, 300), ("stale-a", "keep.md", 1, 300),
            ("orphan-a", "gone.md", 5, 300), ("orphan-b", "gone2.md", 5, 100),
            ("legacy-none", "keep.md", 1, None),
            ("legacy-iso", "keep.md", 1, "1970-01-01T00:00:00.200Z"),
            ("live", "keep.md", 5, 100)]
    scan.add_page([ChromaRow(i, {"tenantId": "t", "repoSlug": "r", "sourcePath": path,
                                 "tenantConfigVersion": stamp,
                                 **({} if at is None else {"ingestedAt": at})})
                   for i, path, stamp, at in rows])
    return scan


ORDER = ["legacy-none", "orphan-b", "legacy-iso", "orphan-a", "stale-a", "stale-b"]


@pytest.mark.parametrize("cap", range(1, len(ORDER) + 2))
def test_one_order_across_every_reason_up_to_the_cap(cap: int) -> None:
    chosen = tally(cap).first_to_go()
    assert list(chosen.order) == ORDER[:cap]
    assert chosen.ids == set(ORDER[:cap])
    shares = ([i for i, _ in chosen.legacy] + [i for _, i in chosen.stale]
              + [i for chunks in chosen.orphans.values() for _, i, _ in chunks])
    assert sorted(shares) == sorted(ORDER[:cap])


def test_a_legacy_ingested_at_sorts_at_its_iso_time_or_first() -> None:
    assert legacy_order("1970-01-01T00:00:01Z") == 1000
    assert legacy_order("1970-01-01T00:00:01") == 1000  # zone-less: UTC
    assert legacy_order("1970-01-01T01:00:01+01:00") == 1000
    assert legacy_order(None) == legacy_order("not a date") == -math.inf


def test_id_bands_name_the_chosen_ids_and_bound_them_by_the_newest_read() -> None:
    bands = id_bands([(1, "a"), (3, "b"), (2, "c")], band_rows=2)
    assert [(b.ids, b.extra) for b in bands] == [
        (("a", "b"), ({"ingestedAt": {"$lte": 3}}, {"ingestedAt": {"$gte": 1}})),
        (("c",), ({"ingestedAt": {"$lte": 2}}, {"ingestedAt": {"$gte": 2}}))]


def test_an_id_band_starts_at_its_oldest_value_rounded_down_to_a_whole_number() -> None:
    # A whole-number operand compares exactly with integer and float values alike.
    [band] = id_bands([(1.5, "a"), (2.25, "b")], band_rows=5)
    assert band.extra[1] == {"ingestedAt": {"$gte": 1}}


def test_content_digests_change_with_the_document_the_embedding_or_the_metadata() -> None:
    def page(document: str, embedding: list[float], metadata: dict[str, object]) -> ColumnPage:
        return ColumnPage(["x"], [metadata], [document], np.asarray([embedding]))

    base = content_digests(page("d", [0.5, 1.0], {"a": 1}))
    assert content_digests(page("d", [0.5, 1.0], {"a": 1})) == base
    # float64 holding float32 values digests as float32 does (what a client hands back)
    assert content_digests(ColumnPage(["x"], [{"a": 1}], ["d"],
                                      np.asarray([[0.5, 1.0]], dtype=np.float32))) == base
    for changed in (page("e", [0.5, 1.0], {"a": 1}), page("d", [0.5, 1.5], {"a": 1}),
                    page("d", [0.5, 1.0], {"a": 2}), page("d", [0.5, 1.0], {"a": True}),
                    page("d", [0.5, 1.0], {"a": 1, "b": 0})):
        assert content_digests(changed) != base


def test_a_withdrawn_line_names_its_ids_for_its_own_archive_only() -> None:
    header = ArchiveHeader("kb", "t", "p1", 5)
    record = unseal(withdrawn_line(header, ["a", "b"], withdrawn_at_ms=9))
    assert withdrawn_ids(record, tenant_id="t", pass_id="p1") == ["a", "b"]
    with pytest.raises(ValueError):
        withdrawn_ids(record, tenant_id="t", pass_id="p2")
    assert withdrawn_ids({"format": 2, "kind": "chunk"}, tenant_id="t", pass_id="p1") is None
