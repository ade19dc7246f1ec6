"""The pure rules of tenant nodes in the original's shape (a neo.mjs graph): the config
`setTenantConfig` writes, the manifest entry `setTenantManifest` writes, a generation given to
the platform's own `tenantRepos` entry, and the repo the original's reconciler names."""

from __future__ import annotations

import pytest

from core.base.rules.tenants import (
    ORIGINAL_CONFIG_DEFAULTS,
    TenantConfig,
    named_as_recorded,
    original_config_properties,
    team_visible,
)
from core.reconcile.rules.generations.orphans import RepoGeneration, declared_in_place
from core.reconcile.rules.manifests import RepoManifest, original_manifest_patch

ENTRY = {"cloneUrl": "https://github.com/acme/repo.git", "credentialRef": "vault:gh",
         "repoSlug": "acme/repo", "branchRef": "main"}


def test_a_new_config_gets_the_originals_defaults_version_1_and_team_visibility() -> None:
    properties, config = original_config_properties("kb-config:acme", {}, exists=False)
    assert properties == {"tenantId": "acme", **ORIGINAL_CONFIG_DEFAULTS, "version": 1,
                          "visibility": "team"}
    assert (config.tenant_id, config.version, config.repo_slug) == ("acme", 1, None)
    properties["customSources"].append("x")
    assert ORIGINAL_CONFIG_DEFAULTS["customSources"] == [], "the defaults are not shared"


def test_a_stored_config_gets_only_its_version_raised_and_team_visibility() -> None:
    stored = {"version": 7, "customSources": ["wiki"], "tenantRepos": [ENTRY]}
    properties, config = original_config_properties("kb-config:acme", stored, exists=True)
    assert properties == {"tenantId": "acme", "version": 8, "visibility": "team"}
    assert config.tenant_repos == [ENTRY]


@pytest.mark.parametrize("version", [None, "3", 0, -1, True, 2.5])
def test_an_unreadable_stored_version_counts_as_0(version: object) -> None:
    properties, _ = original_config_properties("kb-config:acme", {"version": version},
                                               exists=True)
    assert properties["version"] == 1


def test_team_visible_adds_the_marker_and_keeps_the_patch() -> None:
    assert team_visible({"a": 1}) == {"a": 1, "visibility": "team"}


def test_a_manifest_entry_is_the_originals_and_clears_only_a_stale_revision() -> None:
    manifest = RepoManifest("acme/repo", ("a.md",), 5_000)
    assert original_manifest_patch("@acme", manifest, {}) == {
        "tenantId": "acme", "updatedAt": 5_000, "visibility": "team",
        "manifests": {"acme/repo": {"repoSlug": "acme/repo", "pathsAfterPush": ["a.md"],
                                    "updatedAt": 5_000}}}
    stale = {"manifests": {"acme/repo": {"revision": "abc123"}}}
    patch = original_manifest_patch("acme", manifest, stale)
    assert patch["manifests"]["acme/repo"]["revision"] is None
    revised = RepoManifest("acme/repo", ("a.md",), 5_000, revision="def456")
    assert original_manifest_patch("acme", revised, stale)["manifests"]["acme/repo"][
        "revision"] == "def456"


def test_a_generation_goes_into_the_platforms_entry_and_its_clear_keeps_the_entry() -> None:
    other = {"repoSlug": "acme/other", "cloneUrl": "u", "credentialRef": "c"}
    declared = declared_in_place([ENTRY, other], "acme/repo",
                                 RepoGeneration("acme/repo", "md", "2.0.0"))
    assert declared == [{**ENTRY, "parserId": "md", "parserVersion": "2.0.0"}, other]
    identity = declared_in_place(declared, "acme/repo",
                                 RepoGeneration("acme/repo", extraction_identity="ab" * 32))
    assert identity[0] == {**ENTRY, "extractionIdentity": "ab" * 32}, "the old pair goes"
    assert declared_in_place(identity, "acme/repo", None) == [ENTRY, other]


def test_a_generation_for_a_repo_the_platform_has_not_declared_is_refused() -> None:
    with pytest.raises(LookupError, match="cloneUrl"):
        declared_in_place([ENTRY], "acme/new", RepoGeneration("acme/new", "md", "1.0.0"))
    with pytest.raises(LookupError):
        declared_in_place(None, "acme/repo", None)


def test_the_recorded_repo_names_a_tenant_before_its_own_and_a_silent_one_keeps_its_own(
) -> None:
    tenants = [TenantConfig("acme", 2, "acme/own"), TenantConfig("beta", 1, None)]
    named = named_as_recorded(tenants, {"acme": "acme/a", "gamma": "g/x"})
    assert [(t.tenant_id, t.repo_slug) for t in named] == [("acme", "acme/a"), ("beta", None)]
