"""Splitting a batch of keyed writes into rounds that set-based statements can apply (pure).

PostgreSQL runs a statement per row at a price of its own (a round of executor work, however
well pipelined), while one `INSERT … SELECT FROM unnest(…) ON CONFLICT` writes thousands of
rows at once; but such a statement refuses to affect one row twice, and a batch of links may
name one edge several times (each line is a mention: it reinforces again). So a batch goes in
rounds: the n-th write of a key goes to round n. Applying the rounds one after the other gives
exactly what applying the rows one by one gives: the writes of one key keep their order, and
writes of different keys touch different rows.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

Row = TypeVar("Row")


def distinct_key_rounds(rows: Sequence[Row], key: Callable[[Row], Hashable]) -> list[list[Row]]:
    """`rows` split into rounds in which no key appears twice: the n-th row of a key is in
    round n (counting from 0), and each round keeps the rows' order. No rows, no rounds."""
    rounds: list[list[Row]] = []
    seen: dict[Hashable, int] = {}
    for row in rows:
        k = key(row)
        n = seen.get(k, 0)
        seen[k] = n + 1
        if n == len(rounds):
            rounds.append([])
        rounds[n].append(row)
    return rounds
