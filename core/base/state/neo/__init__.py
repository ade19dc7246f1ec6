"""The neo.mjs backend of the store seam: the original's own graph file (`Nodes`/`Edges`
documents, `GraphLog` and its triggers), read and written as its GraphService does, with the
daemons' own state in tables of their own in the same file.

`schema` holds the original's DDL (quoted, era by era) and the daemons' own tables,
`statements` the SQL text, `model` the graph's reads and writes (the original's merges and
reinforcement, in code), `connection` the store (`NeoGraph`). The rules are
`core.base.rules.neo_graph` and `core.base.rules.graph_schema`.
"""

from core.base.state.neo.connection import NeoGraph, NeoTransaction

__all__ = ["NeoGraph", "NeoTransaction"]
