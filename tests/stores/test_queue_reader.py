"""QueueReader batches: whatever the chunk size and the bounds, a batch holds exactly the
lines, offsets and spills that taking one line at a time would give (the reader takes the
lines already buffered in one split, and their parsed-size bound in one pass: this holds
that fast path to the plain definition)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.drain.rules.queue_lines import parsed_size_bound
from core.drain.stores.queue_reader import QueueReader

Batch = list[tuple[int, bytes, int | None]]

#: Bytes that make lines short or long, and that count (`,:[{`) or not in the parsed bound.
_LINE = st.binary(max_size=90).map(lambda b: b.replace(b"\n", b"x").replace(b"\r", b"y"))
_SHAPED = st.lists(st.sampled_from([b"a", b",", b":", b"[", b"{", b" "]), max_size=80).map(
    b"".join)


def expected_batches(data: bytes, *, max_lines: int, max_bytes: int, max_parsed: int | None,
                     max_line: int) -> list[Batch]:
    """The definition: lines in order (an unterminated last line only once the file is
    final), a batch ends when it has `max_lines` lines, `max_bytes` bytes with newlines, or
    its parsed-size bound reaches `max_parsed`; a line over `max_line` is spilled."""
    lines: list[tuple[int, bytes, int | None]] = []
    offset = 0
    for raw in data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n"):
        spilled = len(raw) if len(raw) > max_line else None
        lines.append((offset, b"" if spilled is not None else raw, spilled))
        offset += len(raw) + 1
    if not data:
        lines = []
    batches: list[Batch] = []
    current: Batch = []
    taken = parsed = 0
    for start, raw, spilled in lines:
        current.append((start, raw, spilled))
        taken += len(raw) + 1
        if max_parsed is not None:
            parsed += parsed_size_bound(raw)
        if (len(current) >= max_lines or taken >= max_bytes
                or (max_parsed is not None and parsed >= max_parsed)):
            batches.append(current)
            current, taken, parsed = [], 0, 0
    if current:
        batches.append(current)
    return batches


def read_batches(path: Path, *, chunk: int, max_lines: int, max_bytes: int,
                 max_parsed: int | None, max_line: int) -> list[Batch]:
    """What the reader hands out, batch by batch, reading the file as final."""
    reader = QueueReader(path, spill_to=path.parent / "spill", chunk_bytes=chunk,
                         max_line_bytes=max_line)
    batches: list[Batch] = []
    try:
        while lines := reader.read_lines(max_lines, max_bytes, final=True,
                                         max_parsed_bytes=max_parsed):
            batches.append([(r.offset, r.raw, r.spilled.size if r.spilled else None)
                            for r in lines])
    finally:
        reader.close()
    return batches


@settings(max_examples=500, deadline=None)
@given(
    lines=st.lists(st.one_of(_LINE, _SHAPED), max_size=40),
    terminated=st.booleans(),
    chunk=st.sampled_from([5, 16, 50, 64, 4096]),
    max_lines=st.integers(min_value=1, max_value=12),
    max_bytes=st.sampled_from([1, 40, 200, 1 << 20]),
    max_parsed=st.one_of(st.none(), st.integers(min_value=1, max_value=4_000)),
    max_line=st.sampled_from([20, 60, 1 << 10]),
)
def test_batches_are_the_lines_one_at_a_time_would_give(
    tmp_path_factory: pytest.TempPathFactory, lines: list[bytes], terminated: bool,
    chunk: int, max_lines: int, max_bytes: int, max_parsed: int | None, max_line: int,
) -> None:
    data = b"\n".join(lines) + (b"\n" if terminated and lines else b"")
    folder = tmp_path_factory.mktemp("reader")
    path = folder / "queue.jsonl"
    path.write_bytes(data)
    got = read_batches(path, chunk=chunk, max_lines=max_lines, max_bytes=max_bytes,
                       max_parsed=max_parsed, max_line=max_line)
    assert got == expected_batches(data, max_lines=max_lines, max_bytes=max_bytes,
                                   max_parsed=max_parsed, max_line=max_line)
