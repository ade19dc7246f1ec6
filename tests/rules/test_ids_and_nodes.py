"""Node ids, payload hashes and node contents (pure functions)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.base.rules.ids import normalize_graph_node_id, parse_row_node_id
from core.base.rules.nodes import (
    _js_numbers,
    js_json,
    memory_node,
    memory_payload_hash,
    minimal_session_node,
    payload_hash,
    pick_summary_row,
    session_node,
    session_payload_hash,
)
from core.base.rules.timestamps import epoch_ms_from_created_at, row_time_ms, span_in_words


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("MEMORY:abc", "memory:abc"),
        ("SESSION:xyz", "session:xyz"),
        ("Memory:AbC", "memory:AbC"),  # only the prefix changes case
        ("sEsSiOn:Q", "session:Q"),
        ("memory:abc", "memory:abc"),
        ("CONCEPT:foo", "CONCEPT:foo"),
        ("AGENT:x", "AGENT:x"),
        ("frontier", "frontier"),
        ("", ""),
        (None, None),
        (42, 42),
    ],
)
def test_normalization_table(given: object, expected: object) -> None:
    assert normalize_graph_node_id(given) == expected


@pytest.mark.parametrize("given", ["memory:", "SESSION:", "CONCEPT:foo", "frontier", "", None, 7])
def test_ids_that_name_no_row_are_not_row_ids(given: object) -> None:
    assert parse_row_node_id(given) is None


def test_row_ids_split_into_kind_and_key() -> None:
    parsed = parse_row_node_id("MEMORY:m-1")
    assert parsed is not None
    assert (parsed.kind, parsed.key, parsed.node_id) == ("memory", "m-1", "memory:m-1")


def test_payload_hashes_equal_the_original_systems() -> None:
    assert memory_payload_hash({}) == (
        "7f00e5e56845f024eafd6ff4e62e1037c213968e9895ce9ae7fc8eaef0f0c6fb")
    assert session_payload_hash({}) == (
        "c9a1e702936cb092b44502d18ca29933dc591b5841ad8183f8d80a7391e7c8cd")


def test_payload_hash_ignores_fields_it_does_not_mirror_and_sees_those_it_does() -> None:
    base = {"createdAt": "2026-01-01T00:00:00Z", "sessionId": "s", "userId": "u"}
    assert memory_payload_hash({**base, "extra": 1}) == memory_payload_hash(base)
    assert memory_payload_hash({**base, "createdAt": 5}) != memory_payload_hash(base)


def test_js_json_formats_numbers_and_text_as_javascript_does() -> None:
    assert js_json({"b": 1.0, "a": "é"}) == '{"a":"é","b":1}'


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(value=JSON_VALUES)
def test_js_json_is_byte_identical_to_the_standard_encoder_whatever_the_value(
    value: Any,
) -> None:
    # Payload hashes already stored in graphs depend on these exact bytes.
    reference = json.dumps(_js_numbers(value), sort_keys=True, separators=(",", ":"),
                           ensure_ascii=False)
    assert js_json(value) == reference


@settings(max_examples=400, deadline=None)
@given(payload=st.dictionaries(
    st.sampled_from(["createdAt", "sessionId", "title", "userId"]),
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text()))
def test_payload_hash_is_the_hash_of_js_json_whatever_the_values(payload: Any) -> None:
    # The fast path (orjson straight to bytes) must hash exactly the bytes js_json writes.
    expected = hashlib.sha256(js_json(payload).encode("utf-8")).hexdigest()
    assert payload_hash(payload) == expected


def test_memory_and_session_nodes_carry_exactly_one_marker() -> None:
    meta = {"sessionId": "s1", "createdAt": 1, "userId": "u"}
    memory = memory_node("m1", meta, "backfilled").properties
    assert memory["backfilled"] is True and "liveIngested" not in memory
    assert memory["chromaId"] == "m1" and memory["payloadHash"] == memory_payload_hash(meta)
    session = session_node("s1", "sum-1", {"title": "T"}, "liveIngested").properties
    assert session["liveIngested"] is True and "backfilled" not in session
    assert session["chromaId"] == "sum-1" and session["title"] == "T"


def test_minimal_session_has_no_chroma_id() -> None:
    node = minimal_session_node("s9")
    assert node.id == "session:s9"
    assert node.properties["minimal"] is True and node.properties["backfilled"] is True
    assert "chromaId" not in node.properties


def test_the_earliest_summary_represents_a_session_deterministically() -> None:
    rows: list[tuple[str, dict[str, Any]]] = [
        ("z", {"createdAt": "2026-01-02T00:00:00Z"}),
        ("b", {"createdAt": "not a time"}),
        ("y", {"createdAt": 1767225600000}),  # 2026-01-01, as epoch ms
        ("a", {"createdAt": "2026-01-01T00:00:00"}),  # the same instant, naive = UTC
    ]
    assert pick_summary_row(rows) == ("a", rows[3][1])
    assert pick_summary_row(list(reversed(rows))) == ("a", rows[3][1])
    assert pick_summary_row([]) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-01-01T00:00:00Z", 1767225600000),
        ("2026-01-01T01:00:00+01:00", 1767225600000),
        ("2026-01-01T00:00:00", 1767225600000),
        ("2026-01-01", 1767225600000),
        (1767225600000, 1767225600000),
        (1767225600, 1767225600000),  # epoch seconds
        ("1767225600000", 1767225600000),
        ("yesterday", None),
        ("", None),
        (True, None),
        (float("nan"), None),
        (None, None),
    ],
)
def test_created_at_is_parsed_as_a_time(value: object, expected: int | None) -> None:
    assert epoch_ms_from_created_at(value) == expected


# --- rows as the original writes them (research/neo-deployment.md §4.2, §5.3) ----------------


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ({"timestamp": 1767225600000}, 1767225600000),  # the original's rows: no createdAt
        ({"createdAt": "2026-01-01T00:00:00Z", "timestamp": 5}, 1767225600000),
        ({"createdAt": None, "timestamp": 1767225600000}, 1767225600000),
        ({"createdAt": "soon", "timestamp": 1767225600000}, None),  # never replaced
        ({"timestamp": "2026-01-01T00:00:00Z"}, 1767225600000),
        ({"timestamp": True}, None),
        ({}, None),
    ],
)
def test_a_row_is_dated_by_created_at_else_by_its_timestamp(
    metadata: dict[str, Any], expected: int | None
) -> None:
    assert row_time_ms(metadata) == expected


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({}, "7f00e5e56845f024eafd6ff4e62e1037c213968e9895ce9ae7fc8eaef0f0c6fb"),
        ({"sessionId": "sess-1", "timestamp": 1767225600000, "userId": "tobiu"},
         "330cbb543d8c5f0da9fe0ff825bb14dd40c54a5e57ad456def7e5c50e1421677"),
        ({"sessionId": "agent-session-1", "createdAt": "2026-04-21T09:01:00Z",
          "userId": "tobiu"},
         "294c2a9e0eabadc5658efa3c62465286fe2a3d15990021205ae3d19bdfdca831"),
    ],
)
def test_a_memory_nodes_hash_is_the_originals_check_value(
    payload: dict[str, Any], expected: str
) -> None:
    assert memory_payload_hash(payload) == expected
    assert memory_node("m", payload, "liveIngested").properties["payloadHash"] == expected


def test_a_session_nodes_hash_is_the_originals_check_value() -> None:
    meta = {"sessionId": "agent-session-1", "title": "First session",
            "createdAt": "2026-04-21T09:00:00Z", "userId": "tobiu"}
    expected = "2f49e5d2b736faaaa1a750f92b5f10f8b910791174966926e9db7baf8fddae2a"
    assert session_payload_hash(meta) == expected
    assert session_node("agent-session-1", "summary_agent-session-1", meta,
                        "backfilled").properties["payloadHash"] == expected


def test_a_row_without_created_at_makes_a_node_without_one_and_never_its_timestamp() -> None:
    meta = {"sessionId": "sess-1", "timestamp": 1767225600000, "userId": "tobiu",
            "type": "agent-interaction"}
    memory = memory_node("m", meta, "backfilled").properties
    session = session_node("sess-1", "summary_sess-1", meta, "liveIngested").properties
    for properties in (memory, session):
        assert "createdAt" not in properties and "timestamp" not in properties
        assert 1767225600000 not in properties.values()
    assert memory["payloadHash"] == (
        "330cbb543d8c5f0da9fe0ff825bb14dd40c54a5e57ad456def7e5c50e1421677")


def test_a_field_the_row_lacks_is_no_key_of_its_node_as_in_the_original() -> None:
    memory = memory_node("m", {}, "backfilled").properties
    assert dict(memory) == {"chromaId": "m", "backfilled": True, "payloadHash": (
        "7f00e5e56845f024eafd6ff4e62e1037c213968e9895ce9ae7fc8eaef0f0c6fb")}
    session = session_node("s", "sum", {}, "backfilled").properties
    assert set(session) == {"chromaId", "sessionId", "payloadHash", "backfilled"}
    assert dict(minimal_session_node("s").properties) == {
        "sessionId": "s", "backfilled": True, "minimal": True}


def test_the_earliest_summary_is_chosen_by_timestamp_when_rows_have_no_created_at() -> None:
    rows: list[tuple[str, dict[str, Any]]] = [
        ("summary_b", {"timestamp": 1767225600001}),
        ("summary_a", {"timestamp": 1767225600002}),
        ("summary_c", {"createdAt": "2026-01-01T00:00:00Z", "timestamp": 9_999_999_999_999}),
    ]
    assert pick_summary_row(rows) == ("summary_c", rows[2][1])
    assert pick_summary_row(rows[:2]) == ("summary_b", rows[0][1])


@pytest.mark.parametrize(("seconds", "words"), [
    (0, "0 s"), (3.9, "3 s"), (252, "4 min 12 s"), (3528.592, "58 min 48 s"),
    (7_500, "2 h 5 min"), (3_600, "1 h"), (273_600, "3 d 4 h"), (-5, "0 s"),
])
def test_a_span_reads_in_at_most_two_units(seconds: float, words: str) -> None:
    assert span_in_words(seconds) == words
