"""`kb-tenants remove-manifest` / `remove-yield`: undo a stray manifest or yield snapshot (one
recorded under a misspelled repo before the typo check, say). Nothing to remove is said and is
exit 0: the state asked for holds. A tenant with neither a configuration nor a manifest is
exit 2, naming the known tenants and the closest match."""

from __future__ import annotations

import argparse

from core.base.runtime.settings import load_settings
from core.base.state.state import open_graph
from core.reconcile.known_names import refuse_unknown_holder
from core.reconcile.rules.tenant_names import removal_hint
from core.reconcile.stores.tenant_manifests import remove_manifest_entry
from daemons.cli.commands import EXIT_OK, emit_json, write_text


async def run_remove(args: argparse.Namespace) -> int:
    """Remove the repo's manifest (`remove-manifest`) or yield snapshot (`remove-yield`);
    print `<tenant> <repo>: manifest removed`, or that there was nothing to remove."""
    snapshot_only = args.command == "remove-yield"
    settings = load_settings(args.config)
    graph = await open_graph(settings.state)
    try:
        await refuse_unknown_holder(graph, args.tenant)
        removal = await remove_manifest_entry(graph, args.tenant, args.repo_slug,
                                              snapshot_only=snapshot_only)
    finally:
        await graph.close()
    what = "yield snapshot" if snapshot_only else "manifest"
    if args.json:
        emit_json({"tenantId": args.tenant, "repoSlug": args.repo_slug,
                   "removed": removal.removed})
    elif removal.removed:
        write_text(f"{args.tenant} {args.repo_slug}: {what} removed\n")
    else:
        write_text(f"{args.tenant} {args.repo_slug}: no {what}, nothing to remove"
                   f"{removal_hint(args.repo_slug, removal.removable)}\n")
    return EXIT_OK
