"""`python -m daemons.tenants`: tenant administration.

    python -m daemons.tenants set-config TENANT [--repo-slug R] [--config F]
    python -m daemons.tenants list [--config F] [--json]
    python -m daemons.tenants set-manifest TENANT --repo-slug R
        (--from-git DIR [--ref REF] | --paths-file F) [--force] [--create] [--config F]
    python -m daemons.tenants set-policy TENANT [--orphan-version-gap N]
        [--manifest-grace-ms M] [--auto-tombstone on|off|inherit] [--gc-max-age-ms MS]
        [--gc-max-count N] [--config F]
    python -m daemons.tenants show TENANT [--config F] [--json]
    python -m daemons.tenants set-repo TENANT --repo-slug R [--parser-id P
        [--parser-version V]] [--extraction-identity HEX64] [--clear] [--create] [--config F]
    python -m daemons.tenants set-yield TENANT --repo-slug R --extraction-identity HEX64
        (--paths-file F | -) [--config F]
    python -m daemons.tenants remove-manifest TENANT --repo-slug R [--config F] [--json]
    python -m daemons.tenants remove-yield TENANT --repo-slug R [--config F] [--json]
    python -m daemons.tenants release TENANT [--archive ARCHIVE] [--config F] [--json]

`set-config` raises the tenant's config version by one, so every chunk stamped with an older
one becomes stale. `set-manifest` replaces a repo's manifest once its paths pass the manifest
rules and, unless `--force`, name at least one chunk the repo has (it reads Chroma, as
`set-repo` does for an undeclared repo); `set-policy` never changes the version. Bad input, a
tenant without a configuration or an unknown repo (a typo: `core.reconcile.known_names`)
unless `--create`, is exit 2 with one line, nothing changed. On a neo.mjs graph nodes are
written in the original's shape (`core.base.rules.tenants`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from core.base.chroma import VectorStore
from core.base.config.config import Settings
from core.base.io.clock import now_ms
from core.base.rules.camel_json import to_json
from core.base.rules.errors import ConfigError, LockHeld
from core.base.runtime.settings import load_settings
from core.base.state.graph import original_tenants
from core.base.state.state import open_graph
from core.base.state.tenants import (
    list_tenants,
    set_tenant_config,
    set_tenant_policy,
    tenant_config,
)
from core.reconcile.known_names import (
    SET_CONFIG_HINT,
    known_tenant_repos,
    refuse_unknown_holder,
    refuse_unknown_manifest,
    refuse_unknown_repo,
)
from core.reconcile.manifest_match import match_repo_chunks
from core.reconcile.reports.tenant_show import gather_tenant, render_tenant
from core.reconcile.rules.generations.extraction_snapshot import (
    ExtractionSnapshot,
    is_extraction_identity,
)
from core.reconcile.rules.generations.orphans import repo_generation
from core.reconcile.rules.manifests import RepoManifest, normalize_manifest_paths
from core.reconcile.rules.tenant_policy import policy_patch
from core.reconcile.stores.claimed_paths import paths_at, paths_from_bytes
from core.reconcile.stores.generations import set_extraction_snapshot, set_tenant_repo
from core.reconcile.stores.tenant_manifests import set_tenant_manifest
from daemons.cli.commands import (
    EXIT_OK,
    agreed_config,
    command_name,
    emit_json,
    run_main,
    split_leading_config,
    write_error,
    write_text,
)
from daemons.cli.summaries_admin import set_config_summary, tenants_listing
from daemons.cli.tenant_parser import build_parser, tenant_argument
from daemons.cli.tenant_release import run_release
from daemons.cli.tenant_removal import run_remove

__all__ = ["build_parser", "main", "tenant_argument"]

PROG = "daemons.tenants"


async def run_set_config(args: argparse.Namespace) -> int:
    """Raise the version and say so (`--json`: one object, for scripts)."""
    settings = load_settings(args.config)
    graph = await open_graph(settings.state)
    try:
        config = await set_tenant_config(graph, args.tenant, repo_slug=args.repo_slug)
    except ValueError as exc:  # --repo-slug on a neo.mjs graph: nothing was written
        raise ConfigError(f"argument --repo-slug: {exc}") from None
    finally:
        await graph.close()
    if args.json:
        emit_json(to_json(config))
    else:
        write_text(set_config_summary(config.tenant_id, config.version, config.repo_slug))
    return EXIT_OK


async def run_list(args: argparse.Namespace) -> int:
    """Print every configured tenant (read-only: listing never creates the graph file)."""
    settings = load_settings(args.config)
    graph = await open_graph(settings.state, read_only=True)
    try:
        tenants = await list_tenants(graph)
    finally:
        await graph.close()
    if args.json:
        emit_json({"tenants": to_json(tenants)})
    else:
        write_text(tenants_listing(tenants))
    return EXIT_OK


@dataclass(frozen=True, slots=True)
class ManifestRead:
    """The manifest the flags describe, and the note to print about how its paths were read
    (None when there is nothing to say)."""

    manifest: RepoManifest
    note: str | None


def read_manifest(args: argparse.Namespace, *, now: int) -> ManifestRead:
    """The manifest the flags describe, read and checked (`normalize_manifest_paths`) before
    anything is opened for writing; ConfigError (exit 2, one line) when it cannot be used."""
    if args.ref is not None and args.from_git is None:
        raise ConfigError("argument --ref: only with --from-git")
    try:
        if args.from_git is not None:
            ref = args.ref or "HEAD"
            at = paths_at(args.from_git, ref)
            checked = normalize_manifest_paths(at.paths, source=f"{args.from_git} at {ref}",
                                               numbered=False)
            revision: str | None = at.revision
        else:
            source = "<stdin>" if args.paths_file == "-" else args.paths_file
            data = (sys.stdin.buffer.read() if args.paths_file == "-"
                    else Path(args.paths_file).read_bytes())
            checked = normalize_manifest_paths(paths_from_bytes(data, source=source),
                                               source=source)
            revision = None
    except OSError as exc:
        raise ConfigError(f"argument --paths-file: {exc.strerror}: {exc.filename}") from None
    except ValueError as exc:  # ClaimedPathsError or ManifestPathError: one line each
        flag = "--from-git" if args.from_git is not None else "--paths-file"
        raise ConfigError(f"argument {flag}: {exc}") from None
    note = (f"note: stripped the leading ./ of {checked.stripped_prefixes:,} paths (a find . "
            "listing); manifest paths are relative to the repository's top"
            if checked.stripped_prefixes else None)
    return ManifestRead(RepoManifest(args.repo_slug, checked.paths, now, revision), note)


async def open_store_to_check(settings: Settings, why: str) -> VectorStore:
    """The knowledge base, opened to read before a command writes (nothing is created); a
    store held by a daemon is exit 1 saying `why` it was read and how to do without."""
    try:
        return await VectorStore.open_for_dry_run(settings.chroma)
    except LockHeld as exc:
        raise LockHeld(f"{exc} ({why})") from None


async def check_manifest(settings: Settings, args: argparse.Namespace,
                         manifest: RepoManifest) -> None:
    """Raise ConfigError, before anything is written, for an unknown tenant or repo (unless
    `--create`), and for a manifest that names none of its repo's chunks (unless `--force`):
    recorded, it would make every one of them an orphan. Reads Chroma only when needed."""
    graph = await open_graph(settings.state, read_only=True)
    try:
        declared = await known_tenant_repos(graph, args.tenant, create=args.create)
    finally:
        await graph.close()
    if args.force and (args.create or manifest.repo_slug in declared):
        return
    vectors = await open_store_to_check(
        settings, "the manifest check reads the store: stop the daemon, or pass --force "
        "(with --create for a new repo) to record without the check")
    collection = settings.chroma.knowledge_base_collection
    try:
        await refuse_unknown_repo(vectors, collection, tenant_id=args.tenant,
                                  repo_slug=manifest.repo_slug, declared=declared,
                                  create=args.create)
        if args.force:
            return
        match = await match_repo_chunks(vectors, collection, tenant_id=args.tenant,
                                        repo_slug=manifest.repo_slug, paths=manifest.path_set)
    finally:
        await vectors.close()
    refusal = match.refusal(manifest.repo_slug)
    if refusal is not None:
        raise ConfigError(refusal)


async def run_set_manifest(args: argparse.Namespace) -> int:
    """Record the manifest; print `<repo> <paths> paths [at <revision>]`."""
    settings = load_settings(args.config)
    read = read_manifest(args, now=now_ms())
    manifest = read.manifest
    if read.note:
        write_error(f"{command_name(PROG)}: {read.note}\n")
    await check_manifest(settings, args, manifest)
    graph = await open_graph(settings.state)
    try:
        await set_tenant_manifest(graph, args.tenant, manifest)
        configured = await tenant_config(graph, args.tenant) is not None
    finally:
        await graph.close()
    at = f" at {manifest.revision}" if manifest.revision else ""
    if args.json:
        emit_json({"tenantId": args.tenant, "repoSlug": manifest.repo_slug,
                   "paths": len(manifest.paths_after_push), "revision": manifest.revision,
                   "updatedAt": manifest.updated_at, "configured": configured})
    else:
        write_text(f"{args.tenant} {manifest.repo_slug}: {len(manifest.paths_after_push)} paths"
                   f"{at}\n")
    if not configured:
        write_error(f"{command_name(PROG)}: note: tenant {args.tenant!r} has no configuration "
                    "node; a pass reconciles it once set-config has given it one\n")
    return EXIT_OK


async def run_set_policy(args: argparse.Namespace) -> int:
    """Merge the given policy values; print the policy in force (as `show`)."""
    settings = load_settings(args.config)
    if (args.orphan_version_gap, args.manifest_grace_ms, args.auto_tombstone,
            args.gc_max_age_ms, args.gc_max_count) == (None,) * 5:
        raise ConfigError("nothing to set: give --orphan-version-gap, --manifest-grace-ms, "
                          "--auto-tombstone, --gc-max-age-ms or --gc-max-count")
    try:
        patch = policy_patch(gap=args.orphan_version_gap, grace_ms=args.manifest_grace_ms,
                             auto_tombstone=args.auto_tombstone,
                             gc_max_age_ms=args.gc_max_age_ms, gc_max_count=args.gc_max_count)
    except ValueError as exc:
        raise ConfigError(f"argument {exc}") from None
    graph = await open_graph(settings.state)
    try:
        await known_tenant_repos(graph, args.tenant, hint=SET_CONFIG_HINT)
        await set_tenant_policy(graph, args.tenant, patch)
        shown = await gather_tenant(graph, settings, args.tenant)
    except LookupError as exc:
        raise ConfigError(str(exc).strip("'\"")) from None
    finally:
        await graph.close()
    if args.json:
        emit_json(to_json(shown))
    else:
        write_text(render_tenant(shown))
    return EXIT_OK


async def run_show(args: argparse.Namespace) -> int:
    """Print the tenant (read-only)."""
    settings = load_settings(args.config)
    graph = await open_graph(settings.state, read_only=True)
    try:
        await refuse_unknown_holder(graph, args.tenant)
        shown = await gather_tenant(graph, settings, args.tenant)
    except LookupError as exc:
        raise ConfigError(str(exc).strip("'\"")) from None
    finally:
        await graph.close()
    if args.json:
        emit_json(to_json(shown))
    else:
        write_text(render_tenant(shown))
    return EXIT_OK


async def check_new_repo(settings: Settings, args: argparse.Namespace,
                         declared: frozenset[str]) -> None:
    """ConfigError for a repo the tenant neither declares nor has chunks of (unless
    `--create`); the knowledge base is read only for an undeclared repo."""
    if args.create or args.repo_slug in declared:
        return
    vectors = await open_store_to_check(
        settings, "an undeclared repo is looked for in the store: stop the daemon, or pass "
        "--create")
    try:
        await refuse_unknown_repo(vectors, settings.chroma.knowledge_base_collection,
                                  tenant_id=args.tenant, repo_slug=args.repo_slug,
                                  declared=declared, create=False)
    finally:
        await vectors.close()


async def run_set_repo(args: argparse.Namespace) -> int:
    """Declare (or with --clear remove) a repo's generation; print the tenant's declarations."""
    settings = load_settings(args.config)
    flags = (args.parser_id, args.parser_version, args.extraction_identity)
    if args.clear and flags != (None,) * 3:
        raise ConfigError("argument --clear: not with --parser-id, --parser-version or "
                          "--extraction-identity")
    if not args.clear and flags == (None,) * 3:
        raise ConfigError("nothing to set: give --parser-id or --extraction-identity "
                          "(or --clear)")
    try:
        entry = None if args.clear else repo_generation(
            args.repo_slug, parser_id=args.parser_id, parser_version=args.parser_version,
            extraction_identity=args.extraction_identity)
    except ValueError as exc:
        raise ConfigError(f"argument {exc}") from None
    graph = await open_graph(settings.state)
    try:
        declared = await known_tenant_repos(graph, args.tenant, hint=SET_CONFIG_HINT)
        if not original_tenants(graph):  # there, only the platform declares a repo
            await check_new_repo(settings, args, declared)
        repos = await set_tenant_repo(graph, args.tenant, args.repo_slug, entry)
    except LookupError as exc:
        raise ConfigError(str(exc).strip("'\"")) from None
    finally:
        await graph.close()
    if args.json:
        emit_json({"tenantId": args.tenant, "tenantRepos": repos})
    else:
        shown = entry.stored() if entry else "cleared"
        write_text(f"{args.tenant} {args.repo_slug}: {shown}\n")
    return EXIT_OK


async def run_set_yield(args: argparse.Namespace) -> int:
    """Record a repo's extraction snapshot; print `<repo> <paths> paths yielded`."""
    settings = load_settings(args.config)
    if not is_extraction_identity(args.extraction_identity):
        raise ConfigError("argument --extraction-identity: expected 64 lowercase hex "
                          "characters (a sha256 digest)")
    source = "<stdin>" if args.paths_file == "-" else args.paths_file
    try:
        data = (sys.stdin.buffer.read() if args.paths_file == "-"
                else Path(args.paths_file).read_bytes())
        checked = normalize_manifest_paths(paths_from_bytes(data, source=source),
                                           source=source)
    except OSError as exc:
        raise ConfigError(f"argument --paths-file: {exc.strerror}: {exc.filename}") from None
    except ValueError as exc:
        raise ConfigError(f"argument --paths-file: {exc}") from None
    snapshot = ExtractionSnapshot(checked.paths, args.extraction_identity, now_ms())
    graph = await open_graph(settings.state)
    try:
        await refuse_unknown_holder(graph, args.tenant)
        await refuse_unknown_manifest(graph, args.tenant, args.repo_slug)
        await set_extraction_snapshot(graph, args.tenant, args.repo_slug, snapshot)
    except LookupError as exc:
        raise ConfigError(str(exc).strip("'\"")) from None
    finally:
        await graph.close()
    if args.json:
        emit_json({"tenantId": args.tenant, "repoSlug": args.repo_slug,
                   "paths": len(snapshot.yielded_source_paths),
                   "extractionIdentity": snapshot.extraction_identity,
                   "updatedAt": snapshot.updated_at})
    else:
        write_text(f"{args.tenant} {args.repo_slug}: {len(snapshot.yielded_source_paths)} "
                   "paths yielded\n")
    return EXIT_OK


COMMANDS = {"set-config": run_set_config, "list": run_list, "set-manifest": run_set_manifest,
            "set-policy": run_set_policy, "show": run_show, "set-repo": run_set_repo,
            "set-yield": run_set_yield, "remove-manifest": run_remove, "remove-yield": run_remove,
            "release": run_release}


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Parse and run one subcommand (`--config F` before or after it)."""
    parser = build_parser()
    before, words = split_leading_config(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(words)
    args.config = agreed_config(parser, before, args.config)
    run = COMMANDS[args.command]
    run_main(PROG, lambda: run(args))


if __name__ == "__main__":
    main()
