"""Which schema a graph file holds (pure): this project's (`kb`), the original's (`neo`, in one
of its eras), nothing yet, or something else, told from the file's `sqlite_master` entries and
their columns alone, before anything is written to it.

The original (neo.mjs) keeps its graph as `Nodes(id, [user_id,] data)` and
`Edges(id, [user_id,] source, target, type, data)`, `data` a JSON document, with a `GraphLog`
fed by triggers; this project's tables are `nodes(id, label, properties)` and
`edges(source, target, relationship, weight, properties)`. SQLite table names ignore case, so
the two can never live in one file: the columns say which one a file has.

**The era of a neo.mjs graph**, told once, from its schema (`research/neo-deployment.md` §1.2):

- `GraphLog` has `event_id` -> **E3** (neo-agent-brain);
- else `Nodes` has `user_id` -> **E2** (neo after PR #12618; `SchemaVersion('graph', 1)`);
- else a `GraphLog` table -> **E1** (the #10153 era);
- else -> **V0**, the 2026-04-04 schema (`Nodes`/`Edges` only).

E2 and E3 keep a raw memory under its bare id as an `AGENT_MEMORY` node
(`core.base.rules.neo_graph`); E1 and V0 under `memory:<id>` as `MEMORY`. The schema cannot tell an
E2 graph from before the ingestor's move to bare ids (#17777) from one after it; every E2 graph is
taken as after it. Before it, the original already wrote each new memory's bare-id node at write
time (MemoryService), so an endpoint resolves to the node the graph holds; only a memory whose one
node is an old-form `memory:X` projection (with `chromaId`) gets its bare-id node from its Chroma
row, as the latest original gives it one (its offline migration then folds the two).

A `SchemaVersion('graph', n)` other than 1 is a schema this version does not know: refused, as
the original's own boot refuses it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum

#: `graphSchema`'s values: read the file, this project's schema, the original's.
SCHEMA_AUTO = "auto"
SCHEMA_KB = "kb"
SCHEMA_NEO = "neo"
GRAPH_SCHEMAS = (SCHEMA_AUTO, SCHEMA_KB, SCHEMA_NEO)

#: The one `SchemaVersion('graph', n)` the original has written (and this version reads).
NEO_SCHEMA_VERSION = 1

#: This project's tables in a SQLite state file (`core.base.state.schema.STATE_TABLES`),
#: lowercased: a file holding only some of them is an older
#: or partly created state of ours.
_KB_TABLES = frozenset({
    "nodes", "edges", "kb_ingestion_metrics", "drain_generations", "drain_requeued",
    "daemon_ticks", "daemon_state", "drainer_ticks", "alert_cooldowns", "alerts_fired",
    "restore_holds"})
_KB_NODE_COLUMNS = frozenset({"id", "label", "properties"})
_KB_EDGE_COLUMNS = frozenset({"source", "target", "relationship", "weight", "properties"})
_NEO_NODE_COLUMNS = frozenset({"id", "data"})
_NEO_EDGE_COLUMNS = frozenset({"id", "source", "target", "type", "data"})
#: Objects only the original's boot creates: their presence beside this project's tables
#: means a neo.mjs boot ran on a file of ours (its triggers then break every edge we write).
_NEO_ONLY_TABLES = frozenset({"graphlog", "schemaversion", "summarizationjobs"})
_NEO_TRIGGERS = frozenset({"node_insert", "node_update", "node_delete", "edge_insert",
                           "edge_update", "edge_delete"})


class NeoEra(StrEnum):
    """A version of the original's graph schema (see the module docstring)."""

    V0 = "2026-04-04"
    E1 = "E1"
    E2 = "E2"
    E3 = "E3"

    @property
    def bare_memory_ids(self) -> bool:
        """Whether this era keeps a raw memory as a bare-id `AGENT_MEMORY` node."""
        return self in (NeoEra.E2, NeoEra.E3)


@dataclass(frozen=True, slots=True)
class SchemaObject:
    """One `sqlite_master` entry: its type (`table`, `index`, `trigger`, `view`), name and
    table, and for a table its columns in order."""

    type: str
    name: str
    table: str
    columns: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NeoLayout:
    """What a neo.mjs graph file holds, as far as writing to it goes.

    The table names are as the file spells them (the original's boot checks them
    case-sensitively, so a write never renames one)."""

    era: NeoEra
    nodes_table: str = "Nodes"
    edges_table: str = "Edges"
    nodes_user_id: bool = False
    edges_user_id: bool = False
    graph_log: bool = False
    #: `SchemaVersion('graph', n)`, None when the file has none (E1, or E2 before its stamp).
    schema_version: int | None = None
    #: Whether `kb_ingestion_metrics` is there (then it is the original's: never altered).
    telemetry_table: bool = False

    def described(self) -> str:
        """One line naming it: `neo.mjs graph (E2, SchemaVersion 1, user_id)`."""
        parts = [str(self.era)]
        if self.schema_version is not None:
            parts.append(f"SchemaVersion {self.schema_version}")
        if self.nodes_user_id or self.edges_user_id:
            parts.append("user_id")
        return f"neo.mjs graph ({', '.join(parts)})"


@dataclass(frozen=True, slots=True)
class FoundSchema:
    """What a graph file holds: `kb`, `neo` (with its layout), `new` (no file, or no table
    yet) or `foreign` (anything else, named in `found`)."""

    kind: str
    #: One line naming what was found, for messages.
    found: str
    neo: NeoLayout | None = None


NEW = FoundSchema("new", "no graph yet")


def classify_schema(objects: Collection[SchemaObject],
                    schema_versions: Mapping[str, object] | None = None) -> FoundSchema:
    """The schema `objects` (a file's `sqlite_master`, SQLite's own `sqlite_*` entries left
    out) make, given the rows of its `SchemaVersion` table by id (None when it has none)."""
    tables = {o.name.lower(): o for o in objects if o.type == "table"}
    if not tables:
        return NEW
    nodes, edges = tables.get("nodes"), tables.get("edges")
    if nodes is not None and edges is not None:
        node_columns, edge_columns = set(nodes.columns), set(edges.columns)
        if node_columns >= _KB_NODE_COLUMNS and edge_columns >= _KB_EDGE_COLUMNS:
            return _kb_or_booted(objects, tables)
        if (node_columns >= _NEO_NODE_COLUMNS and "label" not in node_columns
                and edge_columns >= _NEO_EDGE_COLUMNS):
            return _neo(nodes, edges, tables, schema_versions)
    if set(tables) <= _KB_TABLES and not any(
            t is not None and "data" in t.columns for t in (nodes, edges)):
        # This project's tables only, some not created yet (an older or partial state file).
        return _kb_or_booted(objects, tables)
    return FoundSchema("foreign", "tables " + ", ".join(sorted(o.name for o in tables.values()))
                       + " (neither this project's nodes/edges nor neo.mjs's Nodes/Edges)")


def _kb_or_booted(objects: Collection[SchemaObject],
                  tables: Mapping[str, SchemaObject]) -> FoundSchema:
    """This project's graph, unless a neo.mjs boot already ran on it (its tables or its
    triggers beside ours: every edge written after that would fail on `NEW.id`)."""
    theirs = sorted({tables[t].name for t in _NEO_ONLY_TABLES if t in tables}
                    | {o.name for o in objects
                       if o.type == "trigger" and o.name.lower() in _NEO_TRIGGERS})
    if theirs:
        return FoundSchema("foreign", "this project's nodes/edges with neo.mjs's "
                           + ", ".join(theirs) + " (a neo.mjs boot ran on this file)")
    return FoundSchema("kb", "this project's graph (nodes/edges)")


def _neo(nodes: SchemaObject, edges: SchemaObject, tables: Mapping[str, SchemaObject],
         schema_versions: Mapping[str, object] | None) -> FoundSchema:
    log = tables.get("graphlog")
    node_user_id = "user_id" in nodes.columns
    if log is not None and "event_id" in log.columns:
        era = NeoEra.E3
    elif node_user_id:
        era = NeoEra.E2
    elif log is not None:
        era = NeoEra.E1
    else:
        era = NeoEra.V0
    version: int | None = None
    if schema_versions is not None and "graph" in schema_versions:
        raw = schema_versions["graph"]
        if _js_number(raw) != NEO_SCHEMA_VERSION:
            return FoundSchema("foreign", f"a neo.mjs graph with SchemaVersion graph = {raw!r} "
                               f"(this version reads {NEO_SCHEMA_VERSION} only)")
        version = NEO_SCHEMA_VERSION
    layout = NeoLayout(era, nodes.name, edges.name, node_user_id, "user_id" in edges.columns,
                       log is not None, version, "kb_ingestion_metrics" in tables)
    return FoundSchema("neo", layout.described(), layout)


def _js_number(value: object) -> float | None:
    """`Number(value)` as the original's boot reads the version (None for NaN)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip() or "0")
        except ValueError:
            return None
    return None


@dataclass(frozen=True, slots=True)
class SchemaChoice:
    """The schema to open a graph file with, or why it cannot be opened (`refusal`, one
    line: a configuration error, exit 2)."""

    schema: str | None
    refusal: str | None = None


def choose_schema(found: FoundSchema, configured: str, *, path: str,
                  neo_root: bool) -> SchemaChoice:
    """What `graphSchema = configured` makes of the file at `path` holding `found`.

    `auto` takes the file's schema; a new file is `kb`, except with `neoRoot` (the platform
    creates its own graph: a missing one means a wrong path). A file of neither schema, or not
    the one named, is refused with one line naming what was found."""
    if found.kind == "foreign":
        return SchemaChoice(None, f"{path}: cannot be used as the graph: found {found.found}")
    if found.kind == "new":
        if neo_root or configured == SCHEMA_NEO:
            why = "neoRoot is set" if neo_root else 'graphSchema = "neo"'
            return SchemaChoice(None, f"{path}: no neo.mjs graph there ({why}); the platform "
                                "creates its own graph on its first start: start it once, or "
                                "set graphDbPath to the graph it uses")
        return SchemaChoice(SCHEMA_KB)
    if configured in (SCHEMA_AUTO, found.kind):
        return SchemaChoice(found.kind)
    return SchemaChoice(None, f'{path}: graphSchema = "{configured}" but the file holds '
                        f"{found.found}")
