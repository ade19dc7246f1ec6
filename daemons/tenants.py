"""`python -m daemons.tenants`: tenant-config administration.

    python -m daemons.tenants set-config TENANT [--repo-slug R] [--config F]
    python -m daemons.tenants list [--config F] [--json]

`set-config` raises the tenant's config version by one (the first call gives 1) and says so
(`--json`: the tenant's id, version and repo slug as one object); every chunk stamped with an
older version becomes stale for reconciliation.
Only the graph is opened, never Chroma, so these commands are quick.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from core.rules.figures import to_json
from core.rules.tenants import normalize_tenant_id
from core.runtime.settings import load_settings
from core.stores.sqlite import GraphDB
from core.stores.tenants import list_tenants, set_tenant_config
from daemons._cli import EXIT_OK, Parser, add_config_flag, emit_json, run_main
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


def build_parser() -> Parser:
    """`set-config` and `list`, each with its own `--config`."""
    parser = Parser(prog=SCRIPT, description="Tenant configuration versions: raise one, list "
                    "them.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    set_config = commands.add_parser("set-config", help="raise a tenant's config version by one",
                                     description="Raise a tenant's config version by one (the "
                                     "first call gives 1): its chunks stamped with an older "
                                     "version become stale.")
    set_config.add_argument("tenant", metavar="TENANT", type=tenant_argument,
                            help="tenant id (a leading @ is dropped)")
    set_config.add_argument("--repo-slug", metavar="R", type=repo_slug_argument,
                            help="the repository the tenant's chunks come from")
    add_config_flag(set_config)
    set_config.add_argument("--json", action="store_true",
                            help="print exactly one JSON object on stdout")
    listing = commands.add_parser("list", help="every configured tenant and its version",
                                  description="Every configured tenant, its config version "
                                  "and repo.")
    add_config_flag(listing)
    listing.add_argument("--json", action="store_true",
                         help="print exactly one JSON object on stdout")
    return parser


async def run_set_config(args: argparse.Namespace) -> int:
    """Raise the version and say so (`--json`: one object, for scripts)."""
    settings = load_settings(args.config)
    graph = await GraphDB.open(settings.graph_db_path)
    try:
        config = await set_tenant_config(graph, args.tenant, repo_slug=args.repo_slug)
    finally:
        await graph.close()
    if args.json:
        emit_json(to_json(config))
    else:
        sys.stdout.write(set_config_summary(config.tenant_id, config.version, config.repo_slug))
    return EXIT_OK


async def run_list(args: argparse.Namespace) -> int:
    """Print every configured tenant (read-only: listing never creates the graph file)."""
    settings = load_settings(args.config)
    graph = await GraphDB.open(settings.graph_db_path, read_only=True)
    try:
        tenants = await list_tenants(graph)
    finally:
        await graph.close()
    if args.json:
        emit_json({"tenants": to_json(tenants)})
    else:
        sys.stdout.write(tenants_listing(tenants))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Parse and run one subcommand."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    run = run_set_config if args.command == "set-config" else run_list
    run_main(PROG, lambda: run(args))


if __name__ == "__main__":
    main()
