"""The demo's footprint (pure): a digest of everything its last run left in its data folder,
and what changed since, named as an operator would name it.

The demo resets a folder only when it can prove that nobody else wrote there since its own
last run (`core.suite.demo.folder`). Counts cannot prove it: `kb-tenants set-policy` rewrites
a tenant's config node and leaves every count as it was. So the footprint is a sha256 over the
content of every node and edge (ids and properties, as stored) and of every queue file; a
change of a single byte anywhere is a difference. Tenant nodes (ids starting `kb-`: configs,
policies, declared repos, manifests, yield snapshots) also keep a digest per part, so that a
refusal can say which tenant's what changed instead of only "something did".

Memory stays bounded whatever the folder holds: rows arrive in pages (`FootprintBuilder`), and
at most `MAX_TENANT_NODES` tenant nodes keep their parts (past that, a tenant node counts among
the other nodes: a change is still seen, only named less precisely).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

#: The footprint file's format: a file of another format (an older demo's, counts only) proves
#: nothing about the folder.
FOOTPRINT_FORMAT = 2
#: Ids of the tenant nodes (`kb-config:<t>`, `kb-manifest:<t>`).
TENANT_NODE_PREFIX = "kb-"
#: How many tenant nodes keep a digest per part (the demo writes 4 configs and a manifest).
MAX_TENANT_NODES = 1000
#: The queue files the footprint covers, by key, as a refusal names them.
FILE_NAMES: Mapping[str, str] = {
    "queue": "the lazy-edge queue",
    "draining": "the queue's in-flight file (.draining)",
    "deadLetters": "the dead letters",
    "spilled": "the dead letters' kept lines",
}
#: A tenant config's properties, as a refusal names them.
CONFIG_KEYS: Mapping[str, str] = {
    "reconciliationPolicy": "policy",
    "tenantRepos": "declared repos (tenantRepos)",
    "version": "config version",
    "repoSlug": "repo",
}
#: How many changes a refusal names before "and N more".
NAMED_CHANGES = 3


def _sha(value: Any) -> str:
    try:
        encoded = orjson.dumps(value, default=str, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:  # an integer past 64 bits, written by hand
        encoded = json.dumps(value, default=str, sort_keys=True).encode()
    return hashlib.sha256(encoded).hexdigest()


def _row_bytes(row: tuple[Any, ...]) -> bytes:
    """One stored row, unambiguously (a JSON array per row: no two rows encode alike)."""
    return orjson.dumps(list(row), default=str) + b"\n"


def tenant_node_parts(node_id: str, label: Any, properties_json: Any) -> dict[str, str]:
    """A tenant node's parts and their digests: `key:<k>` per top-level property, and on a
    manifests node `manifest:<repo>` and `yield:<repo>` per repo (its extraction snapshot)."""
    try:
        properties = json.loads(properties_json) if isinstance(properties_json, str) else None
    except ValueError:
        properties = None
    if not isinstance(properties, dict):
        return {"properties": _sha(properties_json)}
    parts = {"label": _sha(label)}
    for key, value in properties.items():
        if key == "manifests" and isinstance(value, dict):
            for repo, entry in value.items():
                if isinstance(entry, dict) and "extractionSnapshot" in entry:
                    parts[f"yield:{repo}"] = _sha(entry["extractionSnapshot"])
                    entry = {k: v for k, v in entry.items() if k != "extractionSnapshot"}
                parts[f"manifest:{repo}"] = _sha(entry)
        else:
            parts[f"key:{key}"] = _sha(value)
    return parts


@dataclass(frozen=True, slots=True)
class DemoFootprint:
    """What the demo's last run left: any difference means someone else wrote here since."""

    nodes: int
    edges: int
    #: sha256 over every node that is not in `tenant_nodes`, in id order.
    other_nodes: str
    #: sha256 over every edge, in key order.
    edge_digest: str
    #: Per tenant node id: its row's digest under "" and each part's (`tenant_node_parts`).
    tenant_nodes: Mapping[str, Mapping[str, str]]
    #: Per `FILE_NAMES` key: the file's sha256, None when absent or empty.
    files: Mapping[str, str | None]

    def to_json(self) -> dict[str, Any]:
        """The footprint file's object."""
        return {"format": FOOTPRINT_FORMAT, "nodes": self.nodes, "edges": self.edges,
                "otherNodes": self.other_nodes, "edgeDigest": self.edge_digest,
                "tenantNodes": {k: dict(v) for k, v in self.tenant_nodes.items()},
                "files": dict(self.files)}

    @classmethod
    def from_json(cls, data: Any) -> DemoFootprint:
        """The footprint a file holds; ValueError for anything else (another format, a torn
        or hand-edited file): such a file proves nothing."""
        if not isinstance(data, dict) or data.get("format") != FOOTPRINT_FORMAT:
            raise ValueError("not a footprint of this demo")
        tenants, files = data.get("tenantNodes"), data.get("files")
        if not isinstance(tenants, dict) or not isinstance(files, dict) or not all(
                isinstance(parts, dict) for parts in tenants.values()):
            raise ValueError("not a footprint of this demo")
        try:
            return cls(int(data["nodes"]), int(data["edges"]), str(data["otherNodes"]),
                       str(data["edgeDigest"]),
                       {str(k): {str(p): str(d) for p, d in v.items()}
                        for k, v in tenants.items()},
                       {str(k): None if v is None else str(v) for k, v in files.items()})
        except (KeyError, TypeError) as exc:
            raise ValueError("not a footprint of this demo") from exc


@dataclass(slots=True)
class FootprintBuilder:
    """A footprint made a page of rows at a time (`core.base.state.graph.node_pages`,
    `edge_pages`): nodes as (id, label, properties, document), edges as their columns."""

    nodes: int = 0
    edges: int = 0
    _other_nodes: Any = field(default_factory=hashlib.sha256)
    _edges: Any = field(default_factory=hashlib.sha256)
    _tenant_nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    _files: dict[str, str | None] = field(default_factory=dict)

    def add_nodes(self, rows: Iterable[tuple[Any, ...]]) -> None:
        """Take a page of nodes, in id order."""
        for row in rows:
            self.nodes += 1
            node_id = str(row[0])
            if node_id.startswith(TENANT_NODE_PREFIX) and \
                    len(self._tenant_nodes) < MAX_TENANT_NODES:
                parts = tenant_node_parts(node_id, row[1], row[2])
                parts[""] = hashlib.sha256(_row_bytes(row)).hexdigest()
                self._tenant_nodes[node_id] = parts
            else:
                self._other_nodes.update(_row_bytes(row))

    def add_edges(self, rows: Iterable[tuple[Any, ...]]) -> None:
        """Take a page of edges, in key order."""
        for row in rows:
            self.edges += 1
            self._edges.update(_row_bytes(row))

    def add_file(self, key: str, digest: str | None) -> None:
        """Take a queue file's digest (`FILE_NAMES` key; None: absent or empty)."""
        self._files[key] = digest

    def footprint(self) -> DemoFootprint:
        """The footprint of everything taken."""
        return DemoFootprint(self.nodes, self.edges, self._other_nodes.hexdigest(),
                             self._edges.hexdigest(), self._tenant_nodes,
                             {key: self._files.get(key) for key in FILE_NAMES})


def _tenant_of(node_id: str) -> str:
    return node_id.partition(":")[2] or node_id


def _node_kind(node_id: str) -> str:
    if node_id.startswith("kb-config:"):
        return "config"
    if node_id.startswith("kb-manifest:"):
        return "manifest node"
    return f"node {node_id}"


def _part_name(node_id: str, part: str) -> str:
    """A tenant node's part as a refusal names it: "tenant hooli's policy"."""
    whose = f"tenant {_tenant_of(node_id)}'s"
    kind, _, name = part.partition(":")
    if kind == "manifest":
        return f"{whose} manifest of {name}"
    if kind == "yield":
        return f"{whose} yield snapshot of {name}"
    if kind == "key" and node_id.startswith("kb-config:"):
        return f"{whose} {CONFIG_KEYS.get(name, name)}"
    if kind == "key":
        return f"{whose} {_node_kind(node_id)} ({name})"
    return f"{whose} {_node_kind(node_id)}"


def _tenant_changes(then: Mapping[str, str] | None, now: Mapping[str, str] | None,
                    node_id: str) -> list[str]:
    if then is None or now is None:
        done = "was set" if then is None else "was removed"
        return [f"{_part_name(node_id, '')} {done}"]
    changed = [f"{_part_name(node_id, part)} "
               + ("was set" if part not in then else
                  "was removed" if part not in now else "changed")
               for part in sorted(then.keys() | now.keys())
               if part and then.get(part) != now.get(part)]
    if not changed and then.get("") != now.get(""):
        changed = [f"{_part_name(node_id, '')} changed"]
    return changed


def changes(then: DemoFootprint, now: DemoFootprint) -> list[str]:
    """What differs between the footprint the demo left and the folder now, each as a phrase
    ("tenant hooli's policy changed"); empty when the folder is exactly as the demo left it."""
    found: list[str] = []
    for node_id in sorted(then.tenant_nodes.keys() | now.tenant_nodes.keys()):
        found += _tenant_changes(then.tenant_nodes.get(node_id), now.tenant_nodes.get(node_id),
                                 node_id)
    if then.other_nodes != now.other_nodes:
        found.append(f"the graph's nodes changed ({then.nodes} then, {now.nodes} now)")
    if then.edge_digest != now.edge_digest:
        found.append(f"the graph's edges changed ({then.edges} then, {now.edges} now)")
    found += [f"{name} changed" for key, name in FILE_NAMES.items()
              if then.files.get(key) != now.files.get(key)]
    return found


def describe(found: list[str]) -> str:
    """The first few changes in one phrase, and how many more."""
    named = "; ".join(found[:NAMED_CHANGES])
    more = len(found) - NAMED_CHANGES
    return named + (f"; and {more} more" if more > 0 else "")
