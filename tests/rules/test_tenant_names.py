"""`core.reconcile.rules.tenant_names`: which names a tenant command may write under, and
what a refusal says (the known names, the closest match, how to add one on purpose)."""

from __future__ import annotations

from core.reconcile.rules.tenant_names import (
    closest_name,
    declared_repos,
    removal_hint,
    repo_refusal,
    tenant_refusal,
    unknown_tenant,
)


def test_a_misspelled_tenant_is_refused_naming_the_known_ones_and_the_closest() -> None:
    assert tenant_refusal("hoolli", ["hooli", "acme"], create=False) == (
        'no tenant "hoolli" (known: acme, hooli); did you mean "hooli"? '
        "Pass --create to add it.")


def test_a_known_tenant_or_create_is_no_refusal() -> None:
    assert tenant_refusal("hooli", ["hooli"], create=False) is None
    assert tenant_refusal("hoolli", ["hooli"], create=True) is None


def test_a_name_like_none_of_the_known_is_refused_without_a_guess() -> None:
    assert tenant_refusal("zzz", ["hooli", "acme"], create=False) == (
        'no tenant "zzz" (known: acme, hooli). Pass --create to add it.')
    assert tenant_refusal("zzz", [], create=False) == (
        'no tenant "zzz" (none known yet). Pass --create to add it.')


def test_a_long_list_of_known_names_is_cut_and_counted() -> None:
    names = [f"t{i:02}" for i in range(25)]
    message = unknown_tenant("zzz", names, hint="x")
    assert "(known: t00, t01, t02, t03, t04, t05, t06, t07, t08, t09, and 15 more)." in message


def test_a_misspelled_repo_is_refused_unless_declared_with_chunks_or_created() -> None:
    declared = declared_repos(repo_slug="hooli/search", tenant_repos=None)
    assert repo_refusal("hooli", "hooli/serch", declared, has_chunks=False, create=False) == (
        'tenant hooli has no repo "hooli/serch" (known: hooli/search); did you mean '
        '"hooli/search"? Pass --create to add it.')
    assert repo_refusal("hooli", "hooli/search", declared, has_chunks=False,
                        create=False) is None
    assert repo_refusal("hooli", "hooli/new", declared, has_chunks=True, create=False) is None
    assert repo_refusal("hooli", "hooli/new", declared, has_chunks=False, create=True) is None


def test_declared_repos_are_the_config_slug_the_tenant_repos_and_the_manifests() -> None:
    repos = [{"repoSlug": "github.com/a/x", "cloneUrl": "u"}, {"cloneUrl": "no slug"}, "junk"]
    assert declared_repos(repo_slug=None, tenant_repos=repos,
                          manifest_repos={"m": object()}) == {"github.com/a/x", "m"}
    assert declared_repos(repo_slug="r", tenant_repos="not a list") == {"r"}


def test_the_closest_name_and_the_removal_hint() -> None:
    assert closest_name("hooli/serch", ["hooli/search", "acme/x"]) == "hooli/search"
    assert closest_name("q", ["hooli/search"]) is None
    assert removal_hint("hooli/serch", {"hooli/search": {}}) == ' (did you mean "hooli/search"?)'
    assert removal_hint("q", {"hooli/search": {}}) == ""
