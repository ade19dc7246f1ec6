"""Is the tenant or repo an operator typed one this system knows? (pure)

The tenant commands write under the names they are given: a misspelled tenant or repo would be
recorded as a stray (a manifest whose paths all count as missing and feed the drift alert).
So a name must be known, or be added on purpose (`--create`): a tenant is known when it has a
configuration node, a repo when its tenant declares it (the config's `repoSlug`, a
`tenantRepos` entry, a manifest) or has chunks of it. These functions decide from the names
read; the refusal names what is known and the closest match.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any, Final

from core.reconcile.rules.generations.orphans import declared_repo_slugs

#: How alike two names must be to be offered as "did you mean" (difflib's ratio; its default,
#: which offers `hooli` for `hoolli` and `hooli/search` for `hooli/serch`, not `acme`).
CLOSE_MATCH_CUTOFF: Final = 0.6
#: How many known names a refusal lists before it says how many more there are.
NAMES_LISTED: Final = 10
CREATE_HINT: Final = "Pass --create to add it."


def closest_name(name: str, known: Iterable[str]) -> str | None:
    """The known name most like `name`, or None when none is alike enough."""
    matches = difflib.get_close_matches(name, sorted(set(known)), n=1, cutoff=CLOSE_MATCH_CUTOFF)
    return matches[0] if matches else None


def _known_and_closest(name: str, known: Iterable[str]) -> str:
    names = sorted(set(known))
    if not names:
        return "(none known yet)."
    listed = ", ".join(names[:NAMES_LISTED])
    more = f", and {len(names) - NAMES_LISTED:,} more" if len(names) > NAMES_LISTED else ""
    text = f"(known: {listed}{more})"
    close = closest_name(name, names)
    return f"{text}; did you mean \"{close}\"?" if close is not None else f"{text}."


def unknown_tenant(tenant_id: str, known: Iterable[str], *, hint: str = CREATE_HINT) -> str:
    """The refusal of a tenant that has no configuration: the known tenants, the closest
    match, then `hint` (how to add one on purpose)."""
    return f"no tenant \"{tenant_id}\" {_known_and_closest(tenant_id, known)} {hint}"


def unknown_repo(tenant_id: str, repo_slug: str, known: Iterable[str], *,
                 hint: str = CREATE_HINT, what: str = "repo") -> str:
    """The refusal of a repo its tenant neither declares nor has chunks of (or, `what`
    saying so, has no manifest of)."""
    return (f"tenant {tenant_id} has no {what} \"{repo_slug}\" "
            f"{_known_and_closest(repo_slug, known)} {hint}")


def tenant_refusal(tenant_id: str, known: Iterable[str], *, create: bool) -> str | None:
    """Why a command must not write under `tenant_id` (None: it may): the tenant has no
    configuration and `--create` was not given."""
    names = set(known)
    return None if create or tenant_id in names else unknown_tenant(tenant_id, names)


def declared_repos(*, repo_slug: str | None, tenant_repos: Any,
                   manifest_repos: Iterable[str] = ()) -> frozenset[str]:
    """The repos a tenant declares: its config's `repoSlug`, its `tenantRepos` entries and
    the repos it has a manifest of (the original's configs name theirs only in
    `tenantRepos`)."""
    declared = {*declared_repo_slugs(tenant_repos), *manifest_repos}
    if repo_slug:
        declared.add(repo_slug)
    return frozenset(declared)


def repo_refusal(tenant_id: str, repo_slug: str, declared: Iterable[str], *,
                 has_chunks: bool, create: bool) -> str | None:
    """Why a command must not write under `repo_slug` of the tenant (None: it may): the
    tenant neither declares the repo nor has chunks of it, and `--create` was not given."""
    names = set(declared)
    if create or has_chunks or repo_slug in names:
        return None
    return unknown_repo(tenant_id, repo_slug, names)


def removal_hint(repo_slug: str, present: Iterable[str]) -> str:
    """What `remove-manifest` / `remove-yield` say when the repo has nothing to remove: the
    closest repo that has one, when there is one alike."""
    close = closest_name(repo_slug, present)
    return f" (did you mean \"{close}\"?)" if close is not None else ""
