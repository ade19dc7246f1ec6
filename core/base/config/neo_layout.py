"""Where a neo.mjs deployment keeps its data (pure): the defaults `neoRoot` gives the graph, the
lazy-edge queue and the Chroma server, from the original's layout and its `NEO_*` variables
(`research/neo-deployment.md` §1.1, §5.1, §8). A key set in the configuration file wins over
each of them.

| what | default | variable |
|---|---|---|
| graph | `<neoRoot>/.neo-ai-data/sqlite/memory-core-graph.sqlite` | `NEO_MEMORY_DB_PATH`; else `NEO_AI_DATA_ROOT` gives `<root>/sqlite/memory-core-graph.sqlite` (E2) |
| queue | E3: `<neoRoot>/.neo-ai-data/memory-core/lazy-edges.jsonl`; E1, E2: `<neoRoot>/ai/data/memory-core/lazy-edges.jsonl` | `NEO_LAZY_EDGES_QUEUE_PATH` (every era) |
| Chroma | `http://localhost:8000` | `NEO_CHROMA_HOST`, `NEO_CHROMA_PORT` |

The queue's default follows the era of the graph file (`core.base.rules.graph_schema`): the latest
original keeps it in its data plane, the earlier ones in the checkout. A relative path in a
variable is taken from `neoRoot`, the folder the platform's processes run in.
"""  # noqa: E501 (a table)

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from core.base.config.chroma_server import InvalidChromaUrl, parse_chroma_url
from core.base.rules.graph_schema import NeoEra

#: The platform's data folder in its checkout (its boot creates it).
NEO_DATA_DIR = ".neo-ai-data"
GRAPH_FILE = "sqlite/memory-core-graph.sqlite"
#: The queue of E1 and E2, in the checkout; E3's is in the data plane.
CHECKOUT_QUEUE = "ai/data/memory-core/lazy-edges.jsonl"
PLANE_QUEUE = f"{NEO_DATA_DIR}/memory-core/lazy-edges.jsonl"
DEFAULT_CHROMA_HOST = "localhost"
DEFAULT_CHROMA_PORT = "8000"

GRAPH_ENV = "NEO_MEMORY_DB_PATH"
DATA_ROOT_ENV = "NEO_AI_DATA_ROOT"
QUEUE_ENV = "NEO_LAZY_EDGES_QUEUE_PATH"
CHROMA_HOST_ENV = "NEO_CHROMA_HOST"
CHROMA_PORT_ENV = "NEO_CHROMA_PORT"
#: Every variable read here, in the order a message lists them.
NEO_VARIABLES = (GRAPH_ENV, DATA_ROOT_ENV, QUEUE_ENV, CHROMA_HOST_ENV, CHROMA_PORT_ENV)


class NeoLayoutError(ValueError):
    """A variable that cannot name what it should (one line naming it and why)."""


@dataclass(frozen=True, slots=True)
class NeoDefaults:
    """The defaults a neo.mjs checkout gives (see the module docstring)."""

    #: The platform's data folder: `NEO_AI_DATA_ROOT`, else `<neoRoot>/.neo-ai-data`.
    data_root: Path
    graph_db_path: Path
    chroma_url: str
    #: `NEO_LAZY_EDGES_QUEUE_PATH`, None when unset (the era decides: `queue_path`).
    queue_override: Path | None


def _variable(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name)
    return value if value else None


def _path(neo_root: Path, name: str, value: str) -> Path:
    if value != value.strip() or any(ord(c) < 0x20 for c in value):
        raise NeoLayoutError(f"${name}={value!r}: a path with whitespace around it or a "
                             "control character")
    if value == ":memory:":
        raise NeoLayoutError(f"${name}=:memory: is an in-memory graph no other process can "
                             "see; unset it, or name the platform's graph file")
    path = Path(value).expanduser()
    return path if path.is_absolute() else neo_root / path


def neo_defaults(neo_root: Path, environ: Mapping[str, str]) -> NeoDefaults:
    """The defaults of the checkout at `neo_root` under `environ`; NeoLayoutError for a
    variable that names nothing usable."""
    root_value = _variable(environ, DATA_ROOT_ENV)
    data_root = (_path(neo_root, DATA_ROOT_ENV, root_value) if root_value is not None
                 else neo_root / NEO_DATA_DIR)
    graph_value = _variable(environ, GRAPH_ENV)
    graph = (_path(neo_root, GRAPH_ENV, graph_value) if graph_value is not None
             else data_root / GRAPH_FILE)
    queue_value = _variable(environ, QUEUE_ENV)
    queue = _path(neo_root, QUEUE_ENV, queue_value) if queue_value is not None else None
    host = _variable(environ, CHROMA_HOST_ENV) or DEFAULT_CHROMA_HOST
    port = _variable(environ, CHROMA_PORT_ENV) or DEFAULT_CHROMA_PORT
    shown_host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    try:
        url = parse_chroma_url(f"http://{shown_host}:{port}").url
    except InvalidChromaUrl as exc:
        raise NeoLayoutError(f"${CHROMA_HOST_ENV}={host!r} / ${CHROMA_PORT_ENV}={port!r} do "
                             f"not make a Chroma URL: {exc}") from None
    return NeoDefaults(data_root, graph, url, queue)


def queue_path(neo_root: Path, defaults: NeoDefaults, era: NeoEra | None) -> Path:
    """The queue the platform's extractor appends to: the variable, else the era's place
    (a graph that is not the original's, or none yet: the latest era's)."""
    if defaults.queue_override is not None:
        return defaults.queue_override
    if era in (NeoEra.V0, NeoEra.E1, NeoEra.E2):
        return neo_root / CHECKOUT_QUEUE
    return neo_root / PLANE_QUEUE
