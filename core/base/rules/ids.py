"""Graph node ids (pure): canonical forms and the row-backed `memory:` / `session:` kinds.

Canonical row-backed ids are `memory:<chromaId>` and `session:<sessionId>`. Older producers wrote
`MEMORY:` / `SESSION:`; any casing of those two prefixes is accepted and only the prefix is
lowercased. Every other id (`CONCEPT:foo`, `AGENT:x`, `frontier`) is stored exactly as given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

MEMORY_PREFIX = "memory:"
SESSION_PREFIX = "session:"

RowKind = Literal["memory", "session"]
_ROW_PREFIXES = (MEMORY_PREFIX, SESSION_PREFIX)


def normalize_graph_node_id(node_id: Any) -> Any:
    """The canonical form of a node id; anything that is not a non-empty string is returned
    unchanged: the caller decides what an invalid id means."""
    if not isinstance(node_id, str) or not node_id:
        return node_id
    lowered = node_id[: len(SESSION_PREFIX)].lower()
    if lowered.startswith(MEMORY_PREFIX):
        return MEMORY_PREFIX + node_id[len(MEMORY_PREFIX):]
    if lowered.startswith(SESSION_PREFIX):
        return SESSION_PREFIX + node_id[len(SESSION_PREFIX):]
    return node_id


@dataclass(frozen=True, slots=True)
class RowNodeId:
    """A row-backed node id split into its kind and the Chroma-side key."""

    kind: RowKind
    key: str

    @property
    def node_id(self) -> str:
        """The canonical graph id."""
        return f"{self.kind}:{self.key}"


def parse_row_node_id(node_id: Any) -> RowNodeId | None:
    """Split a `memory:` / `session:` id (any prefix case); None for anything else, including
    an empty body such as `memory:`, which names no row and must not reach Chroma."""
    canonical = (node_id if type(node_id) is str and node_id.startswith(_ROW_PREFIXES)
                 else normalize_graph_node_id(node_id))  # already canonical: the usual case
    if not isinstance(canonical, str):
        return None
    if canonical.startswith(MEMORY_PREFIX):
        key = canonical[len(MEMORY_PREFIX):]
        return RowNodeId("memory", key) if key else None
    if canonical.startswith(SESSION_PREFIX):
        key = canonical[len(SESSION_PREFIX):]
        return RowNodeId("session", key) if key else None
    return None


def memory_node_id(chroma_id: str) -> str:
    """The graph id of a memory row."""
    return MEMORY_PREFIX + chroma_id


def session_node_id(session_id: str) -> str:
    """The graph id of a session."""
    return SESSION_PREFIX + session_id
