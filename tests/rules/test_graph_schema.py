"""Telling a graph file's schema from its `sqlite_master` entries: this project's, the
original's in each era, nothing yet, or something else; and what `graphSchema` makes of it."""

from __future__ import annotations

import pytest

from core.base.rules.graph_schema import (
    NEW,
    NeoEra,
    SchemaObject,
    choose_schema,
    classify_schema,
)

KB_NODES = SchemaObject("table", "nodes", "nodes", ("id", "label", "properties"))
KB_EDGES = SchemaObject("table", "edges", "edges",
                        ("source", "target", "relationship", "weight", "properties"))
V0_NODES = SchemaObject("table", "Nodes", "Nodes", ("id", "data"))
V0_EDGES = SchemaObject("table", "Edges", "Edges", ("id", "source", "target", "type", "data"))
E2_NODES = SchemaObject("table", "Nodes", "Nodes", ("id", "user_id", "data"))
E2_EDGES = SchemaObject("table", "Edges", "Edges",
                        ("id", "user_id", "source", "target", "type", "data"))
LOG = SchemaObject("table", "GraphLog", "GraphLog", ("log_id", "entity_id", "entity_type"))
E3_LOG = SchemaObject("table", "GraphLog", "GraphLog",
                      ("log_id", "entity_id", "entity_type", "event_id", "event_payload"))
TRIGGER = SchemaObject("trigger", "edge_insert", "Edges")


@pytest.mark.parametrize(("objects", "era"), [
    ((V0_NODES, V0_EDGES), NeoEra.V0),
    ((V0_NODES, V0_EDGES, LOG, TRIGGER), NeoEra.E1),
    ((E2_NODES, E2_EDGES, LOG, TRIGGER), NeoEra.E2),
    ((E2_NODES, E2_EDGES, E3_LOG, TRIGGER), NeoEra.E3),
])
def test_each_era_of_the_original_is_told_from_its_schema(
    objects: tuple[SchemaObject, ...], era: NeoEra,
) -> None:
    found = classify_schema(objects)
    assert found.kind == "neo" and found.neo is not None
    assert found.neo.era is era
    assert found.neo.nodes_user_id is found.neo.edges_user_id is (era in (NeoEra.E2, NeoEra.E3))
    assert found.neo.graph_log is (era is not NeoEra.V0)
    assert str(era) in found.found


def test_only_e2_and_e3_keep_raw_memories_under_their_bare_id() -> None:
    assert [e for e in NeoEra if e.bare_memory_ids] == [NeoEra.E2, NeoEra.E3]


@pytest.mark.parametrize("stamp", [1, 1.0, "1", " 1 "])
def test_an_e1_graph_an_e2_boot_upgraded_is_e2_and_its_schema_version_is_read(
    stamp: object,
) -> None:
    # The original reads the stamp with Number(): "1" is 1 to it, and so it is here.
    found = classify_schema((E2_NODES, E2_EDGES, LOG, SchemaObject(
        "table", "SchemaVersion", "SchemaVersion", ("id", "version", "updated_at"))),
        {"graph": stamp})
    assert found.neo is not None and found.neo.schema_version == 1
    assert found.found == "neo.mjs graph (E2, SchemaVersion 1, user_id)"


@pytest.mark.parametrize("version", [2, 0, "2", None, "unreadable"])
def test_a_schema_version_other_than_1_is_a_schema_this_version_does_not_know(
    version: object,
) -> None:
    found = classify_schema((E2_NODES, E2_EDGES, LOG), {"graph": version})
    assert found.kind == "foreign" and f"graph = {version!r}" in found.found


def test_this_projects_tables_are_kb_even_without_their_graph_yet() -> None:
    assert classify_schema((KB_NODES, KB_EDGES)).kind == "kb"
    assert classify_schema((KB_NODES,)).kind == "kb", "a partial state file of ours"
    assert classify_schema((V0_NODES,)).kind == "foreign", "a partial graph of the original's"
    assert classify_schema((SchemaObject("table", "kb_ingestion_metrics",
                                         "kb_ingestion_metrics", ("id",)),)).kind == "kb"
    assert classify_schema(()) == NEW


def test_this_projects_tables_after_a_neo_boot_are_refused_naming_what_the_boot_added() -> None:
    found = classify_schema((KB_NODES, KB_EDGES, LOG, TRIGGER))
    assert found.kind == "foreign"
    assert "GraphLog" in found.found and "edge_insert" in found.found
    assert "a neo.mjs boot ran on this file" in found.found


def test_a_file_of_other_tables_is_foreign_naming_them() -> None:
    found = classify_schema((SchemaObject("table", "users", "users", ("id", "name")),
                             SchemaObject("table", "orders", "orders", ("id",))))
    assert found.kind == "foreign" and "orders, users" in found.found


def test_nodes_with_a_label_column_and_a_data_column_is_neither() -> None:
    odd = SchemaObject("table", "Nodes", "Nodes", ("id", "label", "data"))
    assert classify_schema((odd, V0_EDGES)).kind == "foreign"


NEO_FOUND = classify_schema((E2_NODES, E2_EDGES, E3_LOG))
KB_FOUND = classify_schema((KB_NODES, KB_EDGES))


@pytest.mark.parametrize(("found", "configured", "neo_root", "schema"), [
    (NEO_FOUND, "auto", False, "neo"),
    (NEO_FOUND, "neo", True, "neo"),
    (KB_FOUND, "auto", False, "kb"),
    (KB_FOUND, "kb", False, "kb"),
    (KB_FOUND, "auto", True, "kb"),
    (NEW, "auto", False, "kb"),
    (NEW, "kb", False, "kb"),
])
def test_graph_schema_takes_the_files_schema_and_a_new_file_is_kb(
    found: object, configured: str, neo_root: bool, schema: str,
) -> None:
    choice = choose_schema(found, configured, path="g.sqlite", neo_root=neo_root)  # type: ignore[arg-type]
    assert (choice.schema, choice.refusal) == (schema, None)


@pytest.mark.parametrize(("found", "configured", "neo_root", "words"), [
    (NEO_FOUND, "kb", False, 'graphSchema = "kb" but the file holds neo.mjs graph (E3'),
    (KB_FOUND, "neo", False, 'graphSchema = "neo" but the file holds this project\'s graph'),
    (NEW, "auto", True, "no neo.mjs graph there (neoRoot is set)"),
    (NEW, "neo", False, 'no neo.mjs graph there (graphSchema = "neo")'),
    (classify_schema((KB_NODES, KB_EDGES, LOG)), "auto", False, "cannot be used as the graph"),
])
def test_a_file_not_of_the_schema_named_or_of_none_is_refused_in_one_line(
    found: object, configured: str, neo_root: bool, words: str,
) -> None:
    choice = choose_schema(found, configured, path="g.sqlite", neo_root=neo_root)  # type: ignore[arg-type]
    assert choice.schema is None and choice.refusal is not None
    assert words in choice.refusal and choice.refusal.startswith("g.sqlite: ")
    assert "\n" not in choice.refusal
