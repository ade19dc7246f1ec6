"""The demo's dataset: a small, realistic slice of what the platform writes, built as plain
data (`build_demo_dataset`, pure) and written into the configured stores (`seed_demo`).

It is shaped so that one drain tick and one reconcile pass each have real work to show:
- sessions summarized in the last few hours (live ingestion picks them up), sessions summarized
  days or weeks ago (outside the live window: only an edge brings them in, by back-fill), and
  sessions that were never summarized (back-filled as minimal sessions);
- a lazy-edge queue of provenance edges (`MENTIONED_IN`, `DISCUSSED_IN`, `REFERENCED_BY`) to
  targets that exist, targets the drain must back-fill, targets that were hallucinated (no
  Chroma row: re-queued), one old producer's uppercase `SESSION:` target, and malformed lines (dead-
  lettered at once);
- three tenants whose knowledge-base chunks carry several config versions: one drifted (stale
  and actionable chunks), one slightly behind, one clean; and a fourth whose repo was
  force-pushed: its manifest (the paths at the rewritten head) no longer claims two paths that
  still have chunks (manifest orphans) and claims one that has none (a missing path).

Re-running is safe: Chroma rows and graph nodes are upserted, a tenant's version is raised only
up to its target, and the queue lines are appended only by the first run on a store (a line
appended again would be a new mention: it would reinforce its edge again).

Embeddings are synthetic (derived from the row id): no model is loaded or downloaded.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import structlog

from core.base.io import clock
from core.base.rules.camel_json import to_json
from core.base.rules.nodes import NodeRow
from core.base.rules.rows import ChromaRow
from core.base.rules.timestamps import iso_from_ms
from core.base.runtime.context import TickContext
from core.base.state.daemon_state import get_value, set_value
from core.base.state.graph import original_tenants, upsert_nodes
from core.base.state.tenants import set_tenant_config, tenant_version
from core.drain.stores.queue_files import append_locked
from core.reconcile.rules.manifests import RepoManifest, claimed_paths
from core.reconcile.stores.tenant_manifests import set_tenant_manifest

log = structlog.get_logger(__name__)

#: Dimensions of the synthetic embeddings: enough to look like vectors, small enough to be free.
EMBEDDING_DIM = 8
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
#: Every demo id starts with this, so demo rows are easy to tell apart from real ones.
DEMO_PREFIX = "demo-"


@dataclass(frozen=True, slots=True)
class DemoSession:
    """A session of the demo: who, what, how long ago, and whether it was summarized."""

    key: str
    title: str
    user_id: str
    age_ms: int
    summarized: bool
    #: How the summary's `createdAt` is written: the platform's writers disagree.
    created_format: str


@dataclass(frozen=True, slots=True)
class DemoTenant:
    """A knowledge-base tenant and the config version its chunks should be measured against."""

    tenant_id: str
    repo_slug: str
    version: int
    #: How many chunks carry each config version.
    chunks_by_version: Mapping[int, int]
    #: The source paths its chunks cycle through.
    paths: tuple[str, ...] = ()
    #: The repo's manifest (the paths after its last push), when it has one.
    manifest_paths: tuple[str, ...] | None = None
    #: What kind of tenant it is, as the demo's summary names it.
    kind: str = ""


@dataclass(frozen=True, slots=True)
class DemoDataset:
    """Everything the demo writes."""

    memories: tuple[ChromaRow, ...]
    summaries: tuple[ChromaRow, ...]
    chunks: tuple[ChromaRow, ...]
    #: Graph nodes the queue's edges start from (the extractor's concepts and agents).
    anchor_nodes: tuple[NodeRow, ...]
    tenants: tuple[DemoTenant, ...]
    queue_lines: tuple[bytes, ...]
    #: (tenant, manifest) pairs, recorded as `tenants set-manifest` would.
    manifests: tuple[tuple[str, RepoManifest], ...] = ()


SESSIONS: tuple[DemoSession, ...] = (
    # Summarized hours ago: inside the live-ingestion window.
    DemoSession("s01", "Moving the billing service to async workers", "ada", 1 * HOUR_MS,
                True, "iso-z"),
    DemoSession("s02", "Rate limits for the public search API", "grace", 3 * HOUR_MS,
                True, "epoch-ms"),
    DemoSession("s03", "Tenant isolation review for the knowledge base", "linus", 6 * HOUR_MS,
                True, "iso-offset"),
    # Summarized long ago: only an edge brings them into the graph.
    DemoSession("s04", "Graph store migration to SQLite", "ada", 3 * DAY_MS, True, "iso-naive"),
    DemoSession("s05", "Designing the lazy-edge queue", "grace", 9 * DAY_MS, True, "epoch-s"),
    DemoSession("s06", "Embedding model evaluation", "linus", 40 * DAY_MS, True, "iso-z"),
    # Never summarized: back-filled as minimal sessions.
    DemoSession("s07", "(unsummarized) on-call handover", "ada", 2 * DAY_MS, False, "iso-z"),
    DemoSession("s08", "(unsummarized) incident review", "grace", 12 * DAY_MS, False, "iso-z"),
)
MEMORIES_PER_SESSION = 3

TENANTS: tuple[DemoTenant, ...] = (
    # Drifted: two versions behind on two chunks (actionable), one behind on three.
    DemoTenant("acme", "acme/platform", 3, {3: 6, 2: 3, 1: 2}, kind="drifted"),
    # Clean: every chunk at the current version.
    DemoTenant("globex", "globex/handbook", 2, {2: 5}, kind="clean"),
    # Slightly behind: one chunk one version back (stale, within the grace gap).
    DemoTenant("initech", "initech/tps-service", 2, {2: 4, 1: 1}, kind="slightly behind"),
    # Force-pushed: the rewritten head dropped src/old_index.py and src/legacy/cache.py (three
    # chunks still carry them) and added src/index.py (no chunk yet: a missing path).
    DemoTenant("hooli", "hooli/search", 1, {1: 6},
               paths=("README.md", "docs/guide.md", "src/old_index.py", "src/legacy/cache.py"),
               manifest_paths=("README.md", "docs/guide.md", "src/index.py"),
               kind="force-pushed"),
)

_SOURCE_PATHS = ("README.md", "docs/architecture.md", "docs/runbook.md", "src/api/search.py",
                 "src/workers/billing.py", "docs/tenancy.md")
#: The commit id the force-pushed tenant's manifest was read at (made up, like the repo).
DEMO_REVISION = "5f0c2d9e7a1b3c4d5e6f708192a3b4c5d6e7f809"


def synthetic_embedding(row_id: str, *, dim: int = EMBEDDING_DIM) -> list[float]:
    """A deterministic unit-scale vector derived from the id: stable across runs, no model."""
    digest = hashlib.sha256(row_id.encode("utf-8")).digest()
    return [round(digest[i] / 255, 6) for i in range(dim)]


def session_id(session: DemoSession) -> str:
    """The platform's session id for a demo session."""
    return f"{DEMO_PREFIX}{session.key}"


def memory_id(session: DemoSession, n: int) -> str:
    """The Chroma id of a demo memory (1-based within its session)."""
    return f"{DEMO_PREFIX}m-{session.key}-{n}"


def created_at(epoch_ms: int, style: str) -> str | int:
    """`createdAt` written the way one of the platform's writers writes it."""
    moment = datetime.fromtimestamp(epoch_ms / 1000, UTC)
    match style:
        case "iso-z":
            return iso_from_ms(epoch_ms)
        case "iso-offset":
            return moment.astimezone(timezone(timedelta(hours=2))).isoformat(timespec="seconds")
        case "iso-naive":
            return moment.replace(tzinfo=None).isoformat(timespec="milliseconds")
        case "epoch-s":
            return epoch_ms // 1000
        case _:
            return epoch_ms


def _row(row_id: str, metadata: Mapping[str, Any], document: str) -> ChromaRow:
    return ChromaRow(row_id, dict(metadata), document, synthetic_embedding(row_id))


def _memories(now_ms: int) -> list[ChromaRow]:
    rows = []
    for session in SESSIONS:
        for n in range(1, MEMORIES_PER_SESSION + 1):
            at = now_ms - session.age_ms - (MEMORIES_PER_SESSION - n + 1) * 60_000
            # Memories are written by the agent runtime: ISO, except one older epoch-ms row.
            style = "epoch-ms" if n == 2 else "iso-z"
            rows.append(_row(
                memory_id(session, n),
                {"sessionId": session_id(session), "createdAt": created_at(at, style),
                 "userId": session.user_id},
                f"{session.title}: note {n} by {session.user_id}",
            ))
    return rows


def _summaries(now_ms: int) -> list[ChromaRow]:
    return [
        _row(
            f"{DEMO_PREFIX}summary-{session.key}",
            {"sessionId": session_id(session), "title": session.title,
             "createdAt": created_at(now_ms - session.age_ms, session.created_format),
             "userId": session.user_id},
            f"Summary: {session.title}.",
        )
        for session in SESSIONS if session.summarized
    ]


def _chunks(now_ms: int) -> list[ChromaRow]:
    rows = []
    for tenant in TENANTS:
        n = 0
        for version, count in sorted(tenant.chunks_by_version.items(), reverse=True):
            for _ in range(count):
                n += 1
                paths = tenant.paths or _SOURCE_PATHS
                path = paths[n % len(paths)]
                rows.append(_row(
                    f"{DEMO_PREFIX}kb-{tenant.tenant_id}-{n:02d}",
                    {"tenantId": tenant.tenant_id, "repoSlug": tenant.repo_slug,
                     "tenantConfigVersion": version, "sourcePath": path,
                     "ingestedAt": now_ms - (tenant.version - version + 1) * 7 * DAY_MS},
                    f"{tenant.repo_slug}/{path}, chunk {n} (config v{version})",
                ))
    return rows


ANCHOR_NODES: tuple[NodeRow, ...] = (
    NodeRow("CONCEPT:async-workers", "CONCEPT", {"name": "async workers"}),
    NodeRow("CONCEPT:rate-limiting", "CONCEPT", {"name": "rate limiting"}),
    NodeRow("CONCEPT:tenant-isolation", "CONCEPT", {"name": "tenant isolation"}),
    NodeRow("CONCEPT:sqlite", "CONCEPT", {"name": "SQLite"}),
    NodeRow("CONCEPT:lazy-edges", "CONCEPT", {"name": "lazy edges"}),
    NodeRow("AGENT:librarian", "AGENT", {"name": "librarian"}),
)


def _edge(source: str, target: str, relationship: str, weight: float, why: str) -> bytes:
    line = {"source": source, "target": target, "relationship": relationship,
            "weight": weight, "justification": why}
    return json.dumps(line, separators=(",", ":")).encode("utf-8")


def queue_lines() -> list[bytes]:
    """The queue as the semantic extractor (and a buggy producer) would leave it. No clock
    in any line: a re-run appends identical bytes, which the drainer skips as applied."""
    return [
        # Targets that exist once the tick's live ingestion has run.
        _edge("CONCEPT:async-workers", "memory:demo-m-s01-1", "MENTIONED_IN", 0.9,
              "the note proposes moving invoice rendering to a worker pool"),
        _edge("CONCEPT:rate-limiting", "session:demo-s02", "DISCUSSED_IN", 1.0,
              "the whole session is about search API quotas"),
        _edge("memory:demo-m-s03-2", "AGENT:librarian", "REFERENCED_BY", 0.6,
              "the librarian cited this note when answering a tenancy question"),
        # Missing but back-fillable: rows exist in Chroma, nodes not yet in the graph.
        _edge("CONCEPT:sqlite", "memory:demo-m-s04-1", "MENTIONED_IN", 0.8,
              "compares WAL mode with the old store"),
        _edge("CONCEPT:lazy-edges", "SESSION:demo-s05", "DISCUSSED_IN", 1.0,
              "uppercase target from a pre-normalization producer"),
        _edge("memory:demo-m-s06-3", "AGENT:librarian", "REFERENCED_BY", 0.5,
              "an old evaluation the librarian still quotes"),
        _edge("CONCEPT:tenant-isolation", "memory:demo-m-s07-1", "MENTIONED_IN", 0.7,
              "handover note about a cross-tenant bug; its session was never summarized"),
        _edge("CONCEPT:rate-limiting", "session:demo-s08", "DISCUSSED_IN", 0.7,
              "incident caused by a missing limit; never summarized"),
        # Hallucinated: no such memory row; re-queued until it dead-letters.
        _edge("CONCEPT:async-workers", "memory:demo-m-s01-9", "MENTIONED_IN", 0.4,
              "the extractor invented a fourth note"),
        _edge("memory:demo-m-s99-1", "AGENT:librarian", "REFERENCED_BY", 0.3,
              "a memory from a session that never existed"),
        # Malformed: dead-lettered at once with reason `malformed`.
        b'{"source":"CONCEPT:sqlite","relationship":"MENTIONED_IN"}',
        b'{"source":"CONCEPT:sqlite","target":"memory:demo-m-s04-2","relationship":'
        b'"MENTIONED_IN","weight":"high"}',
        b'{"source":"CONCEPT:lazy-edges","target":',
    ]


def build_demo_dataset(*, now_ms: int) -> DemoDataset:
    """The whole dataset with times relative to `now_ms` (pure)."""
    return DemoDataset(
        memories=tuple(_memories(now_ms)),
        summaries=tuple(_summaries(now_ms)),
        chunks=tuple(_chunks(now_ms)),
        anchor_nodes=ANCHOR_NODES,
        tenants=TENANTS,
        queue_lines=tuple(queue_lines()),
        manifests=tuple(_manifests(now_ms)),
    )


def _manifests(now_ms: int) -> list[tuple[str, RepoManifest]]:
    """Each tenant's manifest, recorded two days ago: after its chunks were ingested (so they
    are judged by it) and past the default day of grace."""
    return [(t.tenant_id, RepoManifest(t.repo_slug, claimed_paths(t.manifest_paths),
                                       now_ms - 2 * DAY_MS, DEMO_REVISION))
            for t in TENANTS if t.manifest_paths is not None]


#: daemon_state key set once the demo's queue lines were appended to a store.
DEMO_QUEUE_SEEDED = "demo.queueSeeded"

# --------------------------------------------------------------------------------------------
# Seeding (I/O)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Seeded:
    """What `seed_demo` wrote, for the demo's report."""

    memories: int
    summaries: int
    chunks: int
    anchor_nodes: int
    #: Each tenant's config version after seeding.
    tenant_versions: dict[str, int]
    #: Queue lines appended (0 after the first run on a store: a line appended again would
    #: be a new mention).
    queue_lines: int


async def seed_demo(context: TickContext, dataset: DemoDataset) -> Seeded:
    """Write the dataset: Chroma rows (upserts), anchor nodes, tenant versions (raised up to
    their target, never past it), and the queue lines (appended with the producer lock)."""
    settings = context.settings
    vectors = context.vectors
    await vectors.upsert(settings.chroma.memory_collection, dataset.memories, create=True)
    await vectors.upsert(settings.chroma.summary_collection, dataset.summaries, create=True)
    await vectors.upsert(settings.chroma.knowledge_base_collection, dataset.chunks, create=True)
    async with context.graph.write() as tx:
        await upsert_nodes(tx, dataset.anchor_nodes)
    versions: dict[str, int] = {}
    for tenant in dataset.tenants:
        version = await tenant_version(context.graph, tenant.tenant_id)
        while version < tenant.version:
            # On a neo.mjs graph the repo is in the platform's `tenantRepos`, never a
            # top-level `repoSlug` (`core.suite.demo.neo` wrote the platform's nodes).
            slug = None if original_tenants(context.graph) else tenant.repo_slug
            version = (await set_tenant_config(context.graph, tenant.tenant_id,
                                               repo_slug=slug)).version
        versions[tenant.tenant_id] = version
    for tenant_id, manifest in dataset.manifests:
        await set_tenant_manifest(context.graph, tenant_id, manifest)
    appended = 0
    if await get_value(context.graph, DEMO_QUEUE_SEEDED) is None:
        await asyncio.to_thread(append_locked, settings.drain.lazy_edges_queue_path,
                                list(dataset.queue_lines))
        await set_value(context.graph, DEMO_QUEUE_SEEDED, "1", now_ms=clock.now_ms())
        appended = len(dataset.queue_lines)
    seeded = Seeded(len(dataset.memories), len(dataset.summaries), len(dataset.chunks),
                    len(dataset.anchor_nodes), versions, appended)
    log.info("demo.seeded", **to_json(seeded))
    return seeded
