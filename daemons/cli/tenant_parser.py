"""The `kb-tenants` command line: every subcommand and its flags (`daemons.tenants` runs
them). `--create` is the one way to write under a tenant or repo nobody knows yet
(`core.reconcile.rules.tenant_names`): without it a misspelled name is refused."""

from __future__ import annotations

import argparse
from pathlib import Path

from core.base.rules.tenants import normalize_tenant_id
from core.reconcile.rules.tenant_policy import AUTO_CHOICES
from daemons.cli.commands import Parser, add_config_flag

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


def add_create_flag(command: Parser, *, tenant: bool = True) -> None:
    """`--create`: write under a name nobody knows yet (without it, a typo is refused)."""
    what = ("a tenant without a configuration, or a repo the tenant neither declares nor "
            "has chunks of" if tenant else
            "a repo the tenant neither declares nor has chunks of")
    command.add_argument("--create", action="store_true",
                         help=f"add it on purpose: {what} is refused otherwise (a typo)")


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
    add_create_flag(manifest)


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
    add_create_flag(repo, tenant=False)
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


def _add_removal_parsers(commands: argparse._SubParsersAction[Parser]) -> None:
    for name, what, description in (
            ("remove-manifest", "a repo's manifest",
             "Remove a repo's manifest (and the yield snapshot beside it), say one recorded "
             "under a misspelled repo: its paths no longer count as missing, its chunks are "
             "no longer judged by it. The other repos' manifests are kept."),
            ("remove-yield", "a repo's yield snapshot",
             "Remove a repo's extraction snapshot (recorded by set-yield); its manifest "
             "stays.")):
        command = _tenant_command(commands, name, f"remove {what} (a stray one, a typo)",
                                  description + " Nothing to remove is said, and exit 0.")
        command.add_argument("--repo-slug", metavar="R", type=repo_slug_argument,
                             required=True, help="the repository whose entry goes")


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
    _add_removal_parsers(commands)
    release = _tenant_command(
        commands, "release", "lift the hold a restore put on the chunks it put back",
        "Lift the hold a restore put on the chunks it put back (every one of the tenant's, "
        "or only those from one archive): the next pass judges them as any other chunk, and "
        "deletes them when they are still actionable. Nothing to release is said, and exit "
        "0.")
    release.add_argument("--archive", metavar="ARCHIVE",
                         help="only the holds of the chunks restored from this archive (its "
                         "path or file name)")
    _tenant_command(commands, "show", "version, policy in force and manifests",
                    "The tenant's version and repo, the reconciliation policy in force (and "
                    "where each value comes from), and its manifests with their path counts "
                    "and times.")
    return parser
