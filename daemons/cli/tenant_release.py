"""`kb-tenants release TENANT [--archive ARCHIVE]`: lift the hold a restore put on the chunks it
put back (CONTRACT "Tombstones"), all of the tenant's or only those from one archive; the next
pass judges them as any other chunk. No hold to release is said and is exit 0. A tenant with
no hold, no configuration and no manifest is exit 2, naming the known tenants."""

from __future__ import annotations

import argparse
from pathlib import Path

from core.base.runtime.settings import load_settings
from core.base.state.state import open_graph
from core.reconcile.known_names import refuse_unknown_holder
from core.reconcile.stores.restore_holds import release_holds, tenant_holds
from daemons.cli.commands import EXIT_OK, emit_json, write_text


async def run_release(args: argparse.Namespace) -> int:
    """Release the tenant's holds (of the archive named, by its file name); print how many."""
    archive = Path(args.archive).name if args.archive is not None else None
    settings = load_settings(args.config)
    graph = await open_graph(settings.state)
    try:
        holds = await tenant_holds(graph, args.tenant)
        if not holds:
            await refuse_unknown_holder(graph, args.tenant)
        released = await release_holds(graph, args.tenant, archive=archive) if holds else 0
    finally:
        await graph.close()
    if args.json:
        emit_json({"tenantId": args.tenant, "archive": archive, "released": released})
        return EXIT_OK
    source = f" from {archive}" if archive is not None else ""
    if released:
        write_text(f"{args.tenant}: released {released} held chunk(s){source}; the next pass "
                   "judges them as any other chunk\n")
    else:
        others = sorted({h.archive for h in holds})
        hint = f" (its holds come from {', '.join(others)})" if others else ""
        write_text(f"{args.tenant}: no held chunks{source}, nothing to release{hint}\n")
    return EXIT_OK
