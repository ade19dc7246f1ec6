"""The original's GraphService rules, as `core.base.rules.neo_graph` states them: node documents and
their merge, edge documents and reinforcement, the memory identity of E2/E3, and the shapes of
the daemons' MEMORY / SESSION nodes on a neo.mjs graph (checked against the original's
ingestor, `research/neo-deployment.md` §2-§4)."""

from __future__ import annotations

import math

import pytest

from core.base.rules.graph_schema import NeoEra
from core.base.rules.neo_graph import (
    AGENT_MEMORY_LABEL,
    NeoNodeWrite,
    StoredNode,
    document_json,
    ids_to_read,
    js_parse_float,
    js_truthy_user_id,
    merged,
    new_edge_document,
    new_node_document,
    project_node,
    projection_conflict,
    reinforced_edge_document,
    reinforced_weight,
    resolve_endpoint,
    updated_node_document,
)
from core.base.rules.nodes import NodeRow, memory_node, minimal_session_node, session_node


def test_reinforcement_runs_as_the_originals_1_then_1_1_then_1_2000000000000002() -> None:
    weights = [1.0]
    for _ in range(2):
        weights.append(reinforced_weight(weights[-1], 1.0))
    assert weights == [1.0, 1.1, 1.2000000000000002]


@pytest.mark.parametrize(("stored", "new", "expected"), [
    (0, 1.0, 1.1),          # a stored 0 counts as 1.0
    (None, 2.0, 1.2),       # a missing weight too
    ("2.5abc", 1.0, 2.6),   # parseFloat reads the leading number
    ("abc", 1.0, 1.1),      # and NaN counts as 1.0
    (4.95, 1.0, 5.0),       # capped at 5
    (True, 1.0, 1.1),
    ("Infinity", 1.0, 5.0),
])
def test_a_stored_weight_is_read_with_parse_float_or_1(stored: object, new: float,
                                                       expected: float) -> None:
    assert reinforced_weight(stored, new) == pytest.approx(expected)


def test_parse_float_reads_what_javascript_reads() -> None:
    assert js_parse_float(" 3.5e2x") == 350.0
    assert js_parse_float(".5") == 0.5 and js_parse_float("-Infinity") == -math.inf
    assert math.isnan(js_parse_float({"weight": 1})) and math.isnan(js_parse_float(""))


def test_a_weight_that_would_be_minus_infinity_stays_finite() -> None:
    assert math.isfinite(reinforced_weight("-Infinity", 1.0))


def test_a_new_edge_has_its_weight_in_properties_and_a_repeat_merges_and_reinforces() -> None:
    edge = new_edge_document("e1", "CONCEPT:a", "b", "R", 1.0, {"justification": "x"})
    assert edge == {"id": "e1", "source": "CONCEPT:a", "target": "b", "type": "R",
                    "properties": {"weight": 1.0, "justification": "x"}}
    again = reinforced_edge_document({**edge, "extra": 7}, 2.0, {"timestamp": 5})
    assert again["properties"] == {"weight": 1.2, "justification": "x", "timestamp": 5}
    assert again["extra"] == 7 and edge["properties"]["weight"] == 1.0, "a copy, not in place"


def test_a_new_node_gets_name_and_description_and_an_existing_one_keeps_every_key() -> None:
    write = NeoNodeWrite("CONCEPT:a", "CONCEPT", {"x": 1})
    created = new_node_document(write)
    assert created == {"id": "CONCEPT:a", "label": "CONCEPT",
                       "properties": {"name": "CONCEPT:a", "description": "", "x": 1}}
    stored = {"id": "CONCEPT:a", "label": "CONCEPT", "extra": True,
              "properties": {"name": "Alpha", "description": "d", "keep": [1], "x": 0}}
    updated = updated_node_document(stored, NeoNodeWrite("CONCEPT:a", "CONCEPT", {"x": None}))
    assert updated == {"id": "CONCEPT:a", "label": "CONCEPT", "extra": True,
                       "properties": {"name": "Alpha", "description": "d", "keep": [1],
                                      "x": None}}


def test_a_merge_goes_into_objects_and_never_deletes_a_key() -> None:
    old = {"manifests": {"r1": {"paths": ["a"], "revision": "x"}, "r2": {"paths": ["b"]}}}
    patch = {"manifests": {"r1": {"paths": ["c"], "revision": None}}}
    assert merged(old, patch) == {"manifests": {"r1": {"paths": ["c"], "revision": None},
                                                "r2": {"paths": ["b"]}}}


@pytest.mark.parametrize(("user", "column"), [
    ("tobiu", "tobiu"), ("", None), (None, None), (0, None), (7, 7), (False, None),
    (True, 1), (float("nan"), None), (["x"], None)])
def test_the_user_id_column_is_the_documents_user_id_or_null(user: object,
                                                             column: object) -> None:
    assert js_truthy_user_id({"userId": user}) == column


def test_documents_are_written_as_json_stringify_writes_them() -> None:
    assert document_json({"id": "é", "properties": {"weight": 1.0, "w": 1.5, "n": [2.0]}}) \
        == '{"id":"é","properties":{"weight":1,"w":1.5,"n":[2]}}'


# ------------------------------------------------------------------------------- the shapes

META = {"sessionId": "s1", "createdAt": "2026-04-21T09:01:00Z", "userId": "@tobiu"}


def test_a_live_memory_on_e1_is_memory_x_named_by_its_first_12_characters() -> None:
    write = project_node(memory_node("0123456789abcdef", META, "liveIngested"), NeoEra.E1)
    assert (write.id, write.label, dict(write.set_fields)) == (
        "memory:0123456789abcdef", "MEMORY", {"name": "0123456789ab"})
    assert list(write.properties) == ["chromaId", "createdAt", "liveIngested", "payloadHash",
                                      "sessionId", "userId"], "the original's order"
    assert write.properties["userId"] == "@tobiu"


@pytest.mark.parametrize("era", [NeoEra.E2, NeoEra.E3])
def test_a_live_memory_on_e2_and_e3_is_the_bare_id_agent_memory_with_its_user_normalized(
    era: NeoEra,
) -> None:
    write = project_node(memory_node("m-1", META, "liveIngested"), era)
    assert (write.id, write.label) == ("m-1", AGENT_MEMORY_LABEL)
    assert dict(write.set_fields) == {"semanticVectorId": "m-1"}
    assert write.name_if_new == "m-1" and write.properties["userId"] == "tobiu"
    backfilled = project_node(memory_node("m-1", META, "backfilled"), era)
    assert backfilled.properties["userId"] == "@tobiu", "the original's back-fill keeps it raw"
    created = new_node_document(write)
    assert list(created["properties"])[:3] == ["name", "description", "semanticVectorId"]


def test_a_row_without_its_fields_gives_a_node_without_them_and_the_originals_hash() -> None:
    write = project_node(memory_node("m-1", {}, "backfilled"), NeoEra.E3)
    assert write.properties == {
        "backfilled": True, "chromaId": "m-1",
        "payloadHash": "7f00e5e56845f024eafd6ff4e62e1037c213968e9895ce9ae7fc8eaef0f0c6fb"}


def test_a_session_is_named_by_its_title_and_keeps_no_title_property() -> None:
    node = session_node("agent-session-1", "summary_agent-session-1",
                        {"title": "First session", "userId": "tobiu",
                         "createdAt": "2026-04-21T09:00:00Z"}, "backfilled")
    write = project_node(node, NeoEra.E1)
    assert dict(write.set_fields) == {"name": "First session"}
    assert write.properties == {
        "backfilled": True, "chromaId": "summary_agent-session-1",
        "createdAt": "2026-04-21T09:00:00Z",
        "payloadHash": "2f49e5d2b736faaaa1a750f92b5f10f8b910791174966926e9db7baf8fddae2a",
        "sessionId": "agent-session-1", "userId": "tobiu"}


def test_a_minimal_session_is_the_originals_three_properties_without_a_hash() -> None:
    write = project_node(minimal_session_node("s9"), NeoEra.E3)
    assert (write.id, dict(write.properties), dict(write.set_fields)) == (
        "session:s9", {"backfilled": True, "minimal": True, "sessionId": "s9"},
        {"name": "s9"})


def test_any_other_node_is_written_as_given() -> None:
    row = NodeRow("kb-config:acme", "KnowledgeBaseTenantConfig", {"version": 2})
    assert project_node(row, NeoEra.E3) == NeoNodeWrite("kb-config:acme",
                                                        "KnowledgeBaseTenantConfig",
                                                        {"version": 2})


# ------------------------------------------------------------------------------- identity

RAW = StoredNode("MEMORY", True)


@pytest.mark.parametrize(("stored", "resolved", "conflict"), [
    ({"X": StoredNode(AGENT_MEMORY_LABEL, False)}, "X", None),
    ({"X": StoredNode(AGENT_MEMORY_LABEL, True), "memory:X": RAW}, "X", None),
    ({"X": StoredNode("CONCEPT", False)}, None, "canonical raw-memory id 'X' is occupied by "
                                                "CONCEPT"),
    ({"memory:X": StoredNode("MEMORY", False)}, "memory:X", None),
    ({"memory:X": StoredNode("CONCEPT", False), "X": StoredNode("CONCEPT", False)},
     "memory:X", None),
    ({"memory:X": RAW}, None, None),
    ({}, None, None),
])
def test_memory_x_resolves_as_the_latest_original_resolves_it(
    stored: dict[str, StoredNode], resolved: str | None, conflict: str | None,
) -> None:
    for era in (NeoEra.E2, NeoEra.E3):
        found = resolve_endpoint("memory:X", era, stored)
        assert (found.node_id, found.conflict) == (resolved, conflict)
    assert ids_to_read("memory:X", NeoEra.E3) == ("memory:X", "X")


def test_on_e1_and_v0_memory_x_is_itself_and_nothing_else_is_read() -> None:
    for era in (NeoEra.V0, NeoEra.E1):
        assert ids_to_read("memory:X", era) == ("memory:X",)
        assert resolve_endpoint("memory:X", era, {"X": StoredNode(AGENT_MEMORY_LABEL, False)}
                                ).node_id is None
        assert resolve_endpoint("memory:X", era, {"memory:X": RAW}).node_id == "memory:X"


def test_a_memory_node_is_not_written_over_another_label_on_its_bare_id() -> None:
    row = memory_node("X", META, "liveIngested")
    assert projection_conflict(row, NeoEra.E3, "CONCEPT") == (
        "canonical raw-memory id 'X' is occupied by CONCEPT")
    assert projection_conflict(row, NeoEra.E3, AGENT_MEMORY_LABEL) is None
    assert projection_conflict(row, NeoEra.E3, None) is None
    assert projection_conflict(row, NeoEra.E1, "CONCEPT") is None
