"""`python -m daemons.tenants`: tenant administration.

    python -m daemons.tenants set-config TENANT [--repo-slug R] [--config F]
    python -m daemons.tenants list [--config F] [--json]
    python -m daemons.tenants set-manifest TENANT --repo-slug R
        (--from-git DIR [--ref REF] | --paths-file F) [--force] [--config F]
    python -m daemons.tenants set-policy TENANT [--orphan-version-gap N]
        [--manifest-grace-ms M] [--auto-tombstone on|off|inherit] [--gc-max-age-ms MS]
        [--gc-max-count N] [--config F]
    python -m daemons.tenants show TENANT [--config F] [--json]
    python -m daemons.tenants set-repo TENANT --repo-slug R [--parser-id P
        [--parser-version V]] [--extraction-identity HEX64] [--clear] [--config F]
    python -m daemons.tenants set-yield TENANT --repo-slug R --extraction-identity HEX64
        (--paths-file F | -) [--config F]

`set-config` raises the tenant's config version by one (the first call gives 1) and says so
(`--json`: the tenant's id, version and repo slug as one object); every chunk stamped with an
older version becomes stale for reconciliation. `set-manifest` records a repo's claimed state
(replacing that repo's manifest) once its paths pass the manifest rules and, unless `--force`,
it names at least one chunk the repo has (the only command here that reads Chroma);
`set-policy` changes the tenant's reconciliation policy and never its version. Bad input is
exit 2 with one line, and changes nothing. The others open only the graph, so they are quick.
On a neo.mjs graph every node is written in the original's shape (`core.base.rules.tenants`):
`--repo-slug` of `set-config`, and `set-repo` of a repo the platform has not declared, are
exit 2 there.
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
from core.base.rules.tenants import normalize_tenant_id
from core.base.runtime.settings import load_settings
from core.base.state.state import open_graph
from core.base.state.tenants import (
    list_tenants,
    set_tenant_config,
    set_tenant_policy,
    tenant_config,
)
from core.reconcile.manifest_match import match_repo_chunks
from core.reconcile.reports.tenant_show import gather_tenant, render_tenant
from core.reconcile.rules.extraction_snapshot import ExtractionSnapshot, is_extraction_identity
from core.reconcile.rules.generations import repo_generation
from core.reconcile.rules.manifests import RepoManifest, normalize_manifest_paths
from core.reconcile.rules.tenant_policy import AUTO_CHOICES, policy_patch
from core.reconcile.stores.claimed_paths import paths_at, paths_from_bytes
from core.reconcile.stores.generations import set_extraction_snapshot, set_tenant_repo
from core.reconcile.stores.tenant_manifests import set_tenant_manifest
from daemons._cli import (
    EXIT_OK,
    Parser,
    add_config_flag,
    agreed_config,
    command_name,
    emit_json,
    run_main,
    split_leading_config,
    write_error,
    write_text,
)
from daemons._summaries import set_config_summary, tenants_listing

PROG = "daemons.tenants"
SCRIPT = "kb-tenants"


def tenant_argument(raw: str) -> str:
    """argparse type: a normalized tenant id, or a one-line usage error."""
    try:
        return normalize_tenant_id(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def repo_slug_argument(raw: str) -> str:
    """argparse type: a non-empty repo slug."""
    if not raw.strip():
        raise argparse.ArgumentTypeError("repo slug is empty")
    return raw.strip()


def _tenant_command(commands: argparse._SubParsersAction[Parser], name: str,
                    help_text: str, description: str) -> Parser:
    """A subcommand on one tenant, with its description, `--config` and `--json`."""
    command = commands.add_parser(name, help=help_text, description=description)
    command.add_argument("tenant", metavar="TENANT", type=tenant_argument,
                         help="tenant id (a leading @ is dropped)")
    add_config_flag(command)
    command.add_argument("--json", action="store_true",
                         help="print exactly one JSON object on stdout")
    return command


def _add_manifest_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    manifest = _tenant_command(
        commands, "set-manifest", "record a repo's claimed paths (replaces its manifest)",
        "Record the paths a repository claims after its last push (its manifest), read from "
        "a git commit or a file, replacing that repo's manifest. A pass then treats chunks of "
        "paths no longer claimed as manifest orphans (actionable past manifestGraceMs) and "
        "claimed paths without chunks as missing. The tenant's version does not change.")
    manifest.add_argument("--repo-slug", metavar="R", type=repo_slug_argument, required=True,
                          help="the repository whose manifest this is")
    source = manifest.add_mutually_exclusive_group(required=True)
    source.add_argument("--from-git", metavar="DIR", type=Path,
                        help="the top of a git work tree, or a bare repository: the paths at "
                        "--ref")
    source.add_argument("--paths-file", metavar="F",
                        help="one path per line (- for stdin), UTF-8")
    manifest.add_argument("--ref", metavar="REF",
                          help="the commit to read with --from-git (default HEAD)")
    manifest.add_argument("--force", action="store_true",
                          help="record it even when it names none of the repo's chunks")


def _add_policy_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    policy = _tenant_command(
        commands, "set-policy", "set the tenant's reconciliation policy (the version stays)",
        "Set the tenant's own reconciliation policy: each value given replaces the tenant's, "
        "a value never given inherits the [knowledgeBase] setting; prints the policy in force "
        "and where each value comes from. The tenant's version does not change.")
    policy.add_argument("--orphan-version-gap", metavar="N", type=float,
                        help="versions behind before a stale chunk is actionable (>= 1)")
    policy.add_argument("--manifest-grace-ms", metavar="M", type=int,
                        help="how old a manifest must be before its orphans are actionable")
    policy.add_argument("--auto-tombstone", choices=AUTO_CHOICES,
                        help="off exempts the tenant; on never overrides a global false")
    policy.add_argument("--gc-max-age-ms", metavar="MS", type=float,
                        help="retention: expire the tenant's chunks older than this (> 0; "
                        "overrides gcRetention.maxAgeMs)")
    policy.add_argument("--gc-max-count", metavar="N", type=int,
                        help="retention: keep the newest N chunks per repo (>= 0; overrides "
                        "gcRetention.maxCount)")


def _add_generation_parsers(commands: argparse._SubParsersAction[Parser]) -> None:
    repo = _tenant_command(
        commands, "set-repo", "declare a repo's current generation (the version stays)",
        "Declare the generation a repo's chunks should carry now (tenantRepos): chunks with "
        "another parserId/parserVersion or extractionIdentity become generation orphans, "
        "deleted only once replaced or no longer yielded. A --parser-id without "
        "--parser-version declares 1.0.0. The tenant's version does not change. On a neo.mjs "
        "graph the repo must be one the platform declared (its tenantRepos entry).")
    repo.add_argument("--repo-slug", metavar="R", type=repo_slug_argument, required=True,
                      help="the repository this declaration is for")
    repo.add_argument("--parser-id", metavar="P", help="the parser that produces its chunks")
    repo.add_argument("--parser-version", metavar="V", help="its version (default 1.0.0)")
    repo.add_argument("--extraction-identity", metavar="HEX64",
                      help="the extraction profile's identity (64 lowercase hex)")
    repo.add_argument("--clear", action="store_true",
                      help="remove the repo's declaration")
    yielded = _tenant_command(
        commands, "set-yield", "record the paths a repo's extraction profile yields",
        "Record the repo's extraction snapshot: the paths the profile of this identity "
        "yields, beside its manifest (whose pathsAfterPush stays the authority on physical "
        "deletion). Chunks of the repo at another identity whose path it no longer yields "
        "become actionable. Paths are checked like a manifest's.")
    yielded.add_argument("--repo-slug", metavar="R", type=repo_slug_argument, required=True,
                         help="the repository whose snapshot this is")
    yielded.add_argument("--extraction-identity", metavar="HEX64", required=True,
                         help="the identity the snapshot was made with (64 lowercase hex)")
    yielded.add_argument("--paths-file", metavar="F", required=True,
                         help="one path per line (- for stdin), UTF-8")


def build_parser() -> Parser:
    """Every subcommand, each with its own `--config`."""
    parser = Parser(prog=SCRIPT,
                    description="Tenant configuration, manifests and policy. --config F may "
                    "come before or after the subcommand (the same file, when both).")
    add_config_flag(parser)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    set_config = _tenant_command(
        commands, "set-config", "raise a tenant's config version by one",
        "Raise a tenant's config version by one (the first call gives 1): its chunks stamped "
        "with an older version become stale.")
    set_config.add_argument("--repo-slug", metavar="R", type=repo_slug_argument,
                            help="the repository the tenant's chunks come from (not on a "
                            "neo.mjs graph, which keeps a tenant's repos in tenantRepos)")
    listing = commands.add_parser("list", help="every configured tenant and its version",
                                  description="Every configured tenant, its config version "
                                  "and repo.")
    add_config_flag(listing)
    listing.add_argument("--json", action="store_true",
                         help="print exactly one JSON object on stdout")
    _add_manifest_parser(commands)
    _add_policy_parser(commands)
    _add_generation_parsers(commands)
    _tenant_command(commands, "show", "version, policy in force and manifests",
                    "The tenant's version and repo, the reconciliation policy in force (and "
                    "where each value comes from), and its manifests with their path counts "
                    "and times.")
    return parser


async def run_set_config(args: argparse.Namespace) -> int:
    """Raise the version and say so (`--json`: one object, for scripts)."""
    settings = load_settings(args.config)
    graph = await open_graph(settings)
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
    graph = await open_graph(settings, read_only=True)
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
    anything is opened for writing; a ConfigError (exit 2, one line) for a folder that is not
    a repository's top, a missing ref, an unreadable file, an empty path list or a path that
    breaks the rules."""
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


async def refuse_unmatched(settings: Settings, tenant_id: str, manifest: RepoManifest) -> None:
    """Raise ConfigError when the manifest names none of its repo's chunks (while the repo has
    some): recorded, it would make every one of them an orphan. Reads Chroma without creating
    anything; a store that cannot be read is exit 1 (nothing recorded)."""
    try:
        vectors = await VectorStore.open_for_dry_run(settings)
    except LockHeld as exc:
        raise LockHeld(f"{exc} (the manifest check reads the store: stop the daemon, or pass "
                       "--force to record without the check)") from None
    try:
        match = await match_repo_chunks(
            vectors, settings.knowledge_base_collection, tenant_id=tenant_id,
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
    if not args.force:
        await refuse_unmatched(settings, args.tenant, manifest)
    graph = await open_graph(settings)
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
    graph = await open_graph(settings)
    try:
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
    graph = await open_graph(settings, read_only=True)
    try:
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
    graph = await open_graph(settings)
    try:
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
    graph = await open_graph(settings)
    try:
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
            "set-yield": run_set_yield}


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
