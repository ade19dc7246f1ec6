"""`reconcile archives` on a terminal (pure: an `ArchiveListing` in, text out): one row per
archive, oldest first, with its tenant, time, chunks, how many a restore could still put back,
where it is and its file name; an archive that cannot be used says why in its row.

On a page narrower than the table's longest words (an archive's name is 50-odd characters)
the rows become records (`core.base.reports.tables`): no name or time is cut in two.
"""

from __future__ import annotations

from core.base.reports.tables import DEFAULT_WIDTH, as_text, table
from core.reconcile.rules.archives.listing import LOCAL, ArchiveListing, ListedArchive


def _where(archive: ListedArchive) -> str:
    return "this host" if archive.where == LOCAL else f"shared (by {archive.host})"


def _subject(listing: ArchiveListing) -> str:
    whose = f"of tenant {listing.tenant_id}" if listing.tenant_id else "of every tenant"
    shared = "; shared copies: the PostgreSQL state" if listing.shared else ""
    return f"{whose} (folder: {listing.folder}{shared})"


def render_archives(listing: ArchiveListing, *, width: int = DEFAULT_WIDTH) -> str:
    """The listing as a table (a `problem` column when an archive has one), and how to
    restore from it."""
    if not listing.archives:
        return as_text(f"No archives {_subject(listing)}.", width=width)
    problems = sum(a.problem is not None for a in listing.archives)
    headers = ["tenant", "created", "chunks", "restorable", "where", "archive"]
    rows = [[a.tenant_id or "?", a.created_at_iso, a.chunks, a.restorable, _where(a), a.name]
            + ([a.problem] if problems else []) for a in listing.archives]
    title = (f"{len(rows):,} archive{'s' if len(rows) != 1 else ''} {_subject(listing)}"
             + (f", {problems:,} with a problem" if problems else ""))
    return as_text(
        table(title, headers + (["problem"] if problems else []), rows,
              numeric=["chunks", "restorable"]),
        "restorable: chunk lines a restore could put back (neither withdrawn nor refused by "
        "the archive's own lines). Restore one: kb-reconcile restore ARCHIVE", width=width)
