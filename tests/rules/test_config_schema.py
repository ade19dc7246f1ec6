"""`core.base.config.config_schema` on its own: the key table is consistent with `Settings` (each
key a field of its group's record, each field a key's), every default passes its own checks,
destructive guards fail closed, and nothing that holds a secret is shown (pure: no file is
read)."""

from __future__ import annotations

import dataclasses
import math
import tomllib
from pathlib import Path
from typing import Any

import pytest

from core.base.config.alert_rules import parse_alert_rules
from core.base.config.config_schema import (
    GROUP_PREFIXES,
    KEYS,
    KEYS_BY_NAME,
    url_without_user_info,
)
from core.base.config.config_settings import GROUP_RECORDS, Settings, settings_from
from core.base.config.secret import Secret
from core.base.config.toml_text import toml_literal


def test_every_key_has_one_entry_and_a_settings_field_of_its_name() -> None:
    names = [k.name for k in KEYS]
    assert len(names) == len(set(names)) == len(KEYS_BY_NAME)
    fields = {f.name for f in dataclasses.fields(Settings)}
    assert {k.field_name for k in KEYS if not k.group} <= fields


def test_each_group_holds_exactly_its_keys_under_their_toml_names() -> None:
    assert set(GROUP_PREFIXES) == set(GROUP_RECORDS)
    assert set(GROUP_RECORDS) <= {f.name for f in dataclasses.fields(Settings)}
    not_keys = {"token"}  # read beside the table (`chromaAuthTokenFile`, `$KB_CHROMA_TOKEN`)
    for group, record in GROUP_RECORDS.items():
        fields = {f.name for f in dataclasses.fields(record)} - not_keys
        assert fields == {k.field_name for k in KEYS if k.group == group}, group
    shown = {k.name: f"{k.group}.{k.field_name}" for k in KEYS}
    assert shown["reconciliationOrphanVersionGap"] == "reconcile.orphan_version_gap"
    assert shown["reconcileMetricsPort"] == "reconcile.metrics_port"
    assert shown["alertWindowMs"] == "alerting.window_ms"
    assert shown["drainerGoneIntervals"] == "drain.drainer_gone_intervals"
    assert shown["memoryCoreChromaUrl"] == "chroma.memory_core_chroma_url"


def test_every_default_passes_its_own_validity_check() -> None:
    checked = [k for k in KEYS if k.valid is not None]
    assert checked, "the table has range-checked keys"
    for key in checked:
        assert key.valid is not None
        # A key that inherits has no default of its own: unset, it takes the other's value.
        default = key.default if key.inherits is None else KEYS_BY_NAME[key.inherits].default
        assert key.valid(default), f"{key.name}'s default {default!r} is out of range"


def test_every_enum_default_is_one_of_its_choices() -> None:
    for key in (k for k in KEYS if k.type == "enum"):
        assert key.default in key.choices, key.name


def test_the_destructive_guards_fail_closed_to_a_value_that_deletes_nothing() -> None:
    closed = {k.name: k.closed_value for k in KEYS if k.fails_closed}
    assert closed["reconciliationMaxDeletesPerTick"] == 0
    # A fraction of 0: any tenant with actionable chunks trips the guard, so nothing is deleted.
    assert closed["reconciliationMaxStaleFraction"] == 0


def test_destructive_switches_default_off() -> None:
    assert KEYS_BY_NAME["reconciliationAutoTombstone"].default is False
    assert KEYS_BY_NAME["alertingEnabled"].default is False


def test_every_default_written_as_toml_reads_back_as_itself() -> None:
    for key in KEYS:
        if key.under_data_dir is not None or key.type == "rules" or key.inherits is not None:
            continue  # no literal default: a folder under dataDir, the rules, another's value
        value = tomllib.loads(f"x = {toml_literal(key.default)}")["x"]
        expected = key.default
        if isinstance(expected, float) and math.isinf(expected):
            assert math.isinf(value), key.name
        else:
            assert value == expected, key.name


def test_a_default_with_no_toml_form_is_refused_not_guessed() -> None:
    with pytest.raises(TypeError):
        toml_literal(object())


@pytest.mark.parametrize(("url", "shown"), [
    ("http://alice:pw@host:8000", "http://host:8000"),
    ("https://tok@chroma.example/prefix", "https://chroma.example/prefix"),
    ("http://host:8000", "http://host:8000"),
    ("http://[::1:8000@host", "host"),  # unparseable: everything after the last `@`
])
def test_a_url_is_shown_without_its_user_info(url: str, shown: str) -> None:
    assert url_without_user_info(url) == shown


def test_a_secret_says_only_that_it_is_there() -> None:
    secret = Secret("s3cr3t-token")
    assert "s3cr3t" not in repr(secret) and "s3cr3t" not in str(secret)
    assert secret.reveal() == "s3cr3t-token"


def test_settings_repr_counts_the_alert_rules_and_hides_their_urls(tmp_path: Path) -> None:
    rules = parse_alert_rules([{"metric": "reconcileEvents", "threshold": 0,
                                "severity": "warning",
                                "channels": ["webhook:https://u:pw@hooks.example/t0ken"]}])
    values: dict[str, Any] = {k.name: k.default if k.under_data_dir is None
                              else tmp_path / k.under_data_dir for k in KEYS}
    values.update(dataDir=tmp_path, chromaPath=tmp_path / "chroma", chromaUrl="",
                  alertRules=rules)
    settings = settings_from(values, token=Secret("s3cr3t-token"))
    shown = repr(settings)
    assert "rules=<1 valid, 0 skipped rules>" in shown
    assert "hooks.example" not in shown and "t0ken" not in shown and "s3cr3t" not in shown
