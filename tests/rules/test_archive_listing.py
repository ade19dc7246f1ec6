"""What an archive's own lines say of it, and which archives pruning may take (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from core.base.rules.rows import ColumnPage
from core.reconcile.rules.archives.format import (
    ArchiveHeader,
    chunk_lines,
    seal,
    withdrawn_line,
)
from core.reconcile.rules.archives.listing import (
    EMPTY,
    NO_HEADER,
    DatedArchive,
    archives_to_prune,
    read_contents,
)

HEADER = ArchiveHeader("kb", "acme", "pass-1", 1_000)
DAY = 86_400_000


def page(ids: Sequence[str], tenant: str = "acme") -> ColumnPage:
    return ColumnPage(list(ids), [{"tenantId": tenant} for _ in ids],
                      [f"doc {i}" for i in ids], [[0.5, 0.25] for _ in ids])


def numbered(lines: Sequence[bytes]) -> list[tuple[int, bytes]]:
    return list(enumerate(lines, start=1))


def test_every_well_formed_chunk_of_the_archive_is_restorable() -> None:
    contents = read_contents(numbered([seal(HEADER.record()),
                                       *chunk_lines(page(["a", "b"]), header=HEADER,
                                                    archived_at_ms=2_000)]))
    assert (contents.tenant_id, contents.collection, contents.created_at_ms) == ("acme", "kb",
                                                                                 1_000)
    assert (contents.chunks, contents.restorable, contents.problem) == (2, 2, None)


def test_withdrawn_refused_and_torn_lines_are_not_restorable() -> None:
    lines = [seal(HEADER.record()),
             *chunk_lines(page(["a", "b"]), header=HEADER, archived_at_ms=2),
             withdrawn_line(HEADER, ["a"], withdrawn_at_ms=3),
             *chunk_lines(page(["a"]), header=HEADER, archived_at_ms=4),  # archived again
             *chunk_lines(page(["z"], tenant="other"), header=HEADER, archived_at_ms=5),
             seal({"kind": "chunk"})[:-3]]
    contents = read_contents(numbered(lines))
    assert (contents.chunks, contents.withdrawn, contents.refused, contents.unreadable) == (
        4, 1, 1, 1)
    assert contents.restorable == 2, "a and b: a's later line is not withdrawn"
    assert contents.problem is not None and contents.problem.startswith(
        "1 unreadable line (first: line 7: no checksum")


def test_an_archive_without_a_header_or_any_line_says_so() -> None:
    assert read_contents(numbered([b"not json"])).problem == NO_HEADER
    assert read_contents([]).problem == EMPTY


def test_a_format_1_archive_is_read_without_a_time() -> None:
    line = (b'{"format": 1, "collection": "kb", "tenantId": "acme", "id": "a", '
            b'"metadata": {"tenantId": "acme"}, "document": "d", "embedding": [0.5]}')
    contents = read_contents(numbered([line, line.replace(b'"a"', b'"b"')]))
    assert (contents.format, contents.tenant_id, contents.created_at_ms) == (1, "acme", None)
    assert (contents.chunks, contents.restorable) == (2, 2)


def test_pruning_keeps_everything_at_age_zero_and_each_tenants_newest() -> None:
    now = 10 * DAY
    archives = [DatedArchive(name, collection, tenant, days * DAY)
                for name, collection, tenant, days in (
                    ("a1", "kb", "acme", 1), ("a2", "kb", "acme", 2), ("a3", "kb", "acme", 9),
                    ("b1", "kb", "beta", 1), ("c1", "other", "acme", 1))]
    assert archives_to_prune(archives, now_ms=now, max_age_ms=0) == []
    assert [a.name for a in archives_to_prune(archives, now_ms=now, max_age_ms=7 * DAY)] == [
        "a1", "a2"]
    assert [a.name for a in archives_to_prune(archives, now_ms=now, max_age_ms=1)] == [
        "a1", "a2"], "the newest of each tenant and collection stays, however old"


def test_an_archive_exactly_at_the_age_stays() -> None:
    archives = [DatedArchive("a1", "kb", "acme", 0), DatedArchive("a2", "kb", "acme", 5)]
    assert archives_to_prune(archives, now_ms=DAY, max_age_ms=DAY) == []
    assert archives_to_prune(archives, now_ms=DAY + 1, max_age_ms=DAY) == [archives[0]]
