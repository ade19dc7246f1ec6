"""The [knowledgeBase] table: lookup order, defaults, relative paths and defensive reading."""

from __future__ import annotations

import math
import shutil
import tomllib
from pathlib import Path

import pytest

from core.base.config.alert_rules import AlertRules
from core.base.config.config import KEYS, resolve_config
from core.base.config.config_docs import render_example_toml, render_markdown_table
from core.base.config.config_settings import setting_value
from core.base.rules.errors import ConfigError
from core.base.runtime.config_file import load_config
from tests.support import run_module

ROOT = Path(__file__).resolve().parents[2]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_no_file_gives_every_default_relative_to_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    loaded = load_config(None, environ={})
    s = loaded.settings
    assert loaded.warnings == ()
    assert s.source is None
    assert s.data_dir == tmp_path / ".kb-data"
    assert s.chroma.path == tmp_path / ".kb-data" / "chroma"
    assert s.state.graph_db_path == tmp_path / ".kb-data" / "graph.sqlite"
    assert s.drain.lazy_edges_queue_path == tmp_path / ".kb-data/memory-core/lazy-edges.jsonl"
    assert s.chroma.url == "" and not s.chroma.server_mode
    assert s.chroma.memory_collection == "neo-agent-memory"
    assert s.chroma.summary_collection == "neo-agent-sessions"
    assert s.chroma.knowledge_base_collection == "neo-knowledge-base"
    assert s.drain.rem_interval_ms == 3_600_000
    assert s.drain.rem_live_ingest_overlap_ms == 86_400_000
    assert s.drain.lazy_edge_max_attempts == 10
    assert s.reconcile.enabled is False
    assert s.reconcile.auto_tombstone is False
    assert s.reconcile.orphan_version_gap == 2
    assert s.reconcile.max_deletes_per_tick == 10_000
    assert s.reconcile.max_stale_fraction == 0.5
    assert s.alerting.enabled is False
    assert s.alerting.interval_ms == 900_000
    assert s.alerting.cooldown_ms == 3_600_000
    assert s.alerting.window_ms == 3_600_000
    assert s.alerting.rules == AlertRules()
    assert s.log_format == "auto"
    assert s.metrics_port == 0


def test_lookup_order_is_flag_then_env_then_config_kb_toml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "config/kb.toml", "[knowledgeBase]\nremIntervalMs = 1\n")
    env_file = write(tmp_path / "env.toml", "[knowledgeBase]\nremIntervalMs = 2\n")
    flag_file = write(tmp_path / "flag.toml", "[knowledgeBase]\nremIntervalMs = 3\n")

    assert load_config(None, environ={}).settings.drain.rem_interval_ms == 1
    env = {"KB_CONFIG": str(env_file)}
    assert load_config(None, environ=env).settings.drain.rem_interval_ms == 2
    assert load_config(str(flag_file), environ=env).settings.drain.rem_interval_ms == 3


def test_relative_paths_resolve_against_the_config_files_folder(tmp_path: Path) -> None:
    config = write(
        tmp_path / "etc/kb.toml",
        '[knowledgeBase]\ndataDir = "state"\ngraphDbPath = "db/graph.sqlite"\n',
    )
    s = load_config(str(config), environ={}).settings
    assert s.data_dir == tmp_path / "etc/state"
    assert s.state.graph_db_path == tmp_path / "etc/db/graph.sqlite"
    # Defaults that live under dataDir follow it.
    assert s.chroma.path == tmp_path / "etc/state/chroma"
    assert s.source == config.resolve()


def test_wrong_type_takes_the_default_with_one_warning_naming_key_type_and_value(
    tmp_path: Path,
) -> None:
    loaded = resolve_config(
        {"knowledgeBase": {"remIntervalMs": "soon", "lazyEdgeMaxAttempts": 3}},
        base_dir=tmp_path,
    )
    assert loaded.settings.drain.rem_interval_ms == 3_600_000
    assert loaded.settings.drain.lazy_edge_max_attempts == 3
    assert len(loaded.warnings) == 1
    message = loaded.warnings[0].message
    assert loaded.warnings[0].key == "remIntervalMs"
    assert "remIntervalMs" in message and "integer" in message and "'soon'" in message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("remIntervalMs", 0),
        ("remIntervalMs", True),  # a boolean is not an integer
        ("remIntervalMs", 1.5),
        ("lazyEdgeMaxAttempts", 0),
        ("metricsPort", 70000),
        ("logFormat", "xml"),
        ("alertRules", "reconcileEvents > 0"),
    ],
)
def test_out_of_range_or_mistyped_values_fall_back_to_their_default(
    tmp_path: Path, key: str, value: object
) -> None:
    loaded = resolve_config({"knowledgeBase": {key: value}}, base_dir=tmp_path)
    default = resolve_config({}, base_dir=tmp_path).settings
    field = next(k for k in KEYS if k.name == key)
    assert setting_value(loaded.settings, field) == setting_value(default, field)
    assert [w.key for w in loaded.warnings] == [key]
    assert loaded.settings.invalid_guards == ()


def test_each_daemon_takes_its_own_metrics_port_else_metrics_port(tmp_path: Path) -> None:
    unset = resolve_config({"knowledgeBase": {"metricsPort": 9100}}, base_dir=tmp_path)
    assert (unset.settings.drain.metrics_port, unset.settings.reconcile.metrics_port) == (
        9100, 9100)
    own = resolve_config({"knowledgeBase": {"metricsPort": 9100, "drainMetricsPort": 9101,
                                            "reconcileMetricsPort": 0}}, base_dir=tmp_path)
    assert (own.settings.metrics_port, own.settings.drain.metrics_port,
            own.settings.reconcile.metrics_port) == (9100, 9101, 0)
    assert not own.warnings
    bad = resolve_config({"knowledgeBase": {"metricsPort": 9100, "drainMetricsPort": "9101"}},
                         base_dir=tmp_path)
    assert bad.settings.drain.metrics_port == 9100
    assert [w.key for w in bad.warnings] == ["drainMetricsPort"]
    assert "metricsPort's value" in bad.warnings[0].message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("reconciliationMaxDeletesPerTick", -1),
        ("reconciliationMaxDeletesPerTick", 1.5),
        ("reconciliationMaxDeletesPerTick", "10"),
        ("reconciliationMaxDeletesPerTick", True),
        ("reconciliationMaxDeletesPerTick", float("inf")),
        ("reconciliationMaxDeletesPerTick", [10]),
        ("reconciliationMaxStaleFraction", 0),
        ("reconciliationMaxStaleFraction", 0.0),
        ("reconciliationMaxStaleFraction", -1),
        ("reconciliationMaxStaleFraction", 1.5),
        ("reconciliationMaxStaleFraction", float("nan")),
        ("reconciliationMaxStaleFraction", float("-inf")),
        ("reconciliationMaxStaleFraction", "0.5"),
        ("reconciliationMaxStaleFraction", False),
    ],
)
def test_an_invalid_destructive_guard_fails_closed_instead_of_taking_its_default(
    tmp_path: Path, key: str, value: object
) -> None:
    loaded = resolve_config({"knowledgeBase": {key: value}}, base_dir=tmp_path)
    [warning] = loaded.warnings
    assert warning.key == key
    assert "deleting nothing until it is fixed" in warning.message
    assert loaded.settings.invalid_guards == (key,)
    field = next(k for k in KEYS if k.name == key)
    assert setting_value(loaded.settings, field) == 0  # a value that lets nothing through


@pytest.mark.parametrize(
    ("key", "value", "effect"),
    [
        ("reconciliationOrphanVersionGap", 0.5, "nothing is actionable by version"),
        ("reconciliationOrphanVersionGap", float("nan"), "nothing is actionable by version"),
        ("reconciliationOrphanVersionGap", "2", "nothing is actionable by version"),
        ("reconciliationOrphanVersionGap", True, "nothing is actionable by version"),
        ("reconciliationManifestGraceMs", -1, "no manifest orphan is actionable"),
        ("reconciliationManifestGraceMs", 1.5, "no manifest orphan is actionable"),
        ("reconciliationManifestGraceMs", "1d", "no manifest orphan is actionable"),
        ("reconciliationManifestGraceMs", False, "no manifest orphan is actionable"),
    ],
)
def test_an_invalid_gap_or_grace_fails_closed_instead_of_loosening_to_its_default(
    tmp_path: Path, key: str, value: object, effect: str
) -> None:
    # A looser default (a gap of 2 where 5 was meant) could delete what the operator meant to
    # keep: the value closes what it governs (math.inf: nothing is ever that old or far
    # behind), and the pass's other deletions go on.
    loaded = resolve_config({"knowledgeBase": {key: value}}, base_dir=tmp_path)
    [warning] = loaded.warnings
    assert f"{effect} until it is fixed" in warning.message
    assert loaded.settings.invalid_guards == (key,)
    field = next(k for k in KEYS if k.name == key)
    assert setting_value(loaded.settings, field) == math.inf


def test_a_max_deletes_of_zero_is_valid_and_simply_deletes_nothing(tmp_path: Path) -> None:
    loaded = resolve_config({"knowledgeBase": {"reconciliationMaxDeletesPerTick": 0}},
                            base_dir=tmp_path)
    assert (loaded.warnings, loaded.settings.invalid_guards) == ((), ())


def test_an_invalid_alert_rules_value_is_described_never_quoted(tmp_path: Path) -> None:
    """It may hold webhook URLs with credentials; the warning names its type only."""
    loaded = resolve_config({"knowledgeBase": {"alertRules": {
        "channels": ["webhook:http://user:PASSWORD@hooks.example/x?token=SECRET"]}}},
        base_dir=tmp_path)
    [warning] = loaded.warnings
    assert "got a dict" in warning.message
    assert "PASSWORD" not in warning.message and "SECRET" not in warning.message


def test_an_integer_is_accepted_where_a_number_is_expected(tmp_path: Path) -> None:
    loaded = resolve_config(
        {"knowledgeBase": {"reconciliationOrphanVersionGap": 3,
                           "reconciliationMaxStaleFraction": 1}},
        base_dir=tmp_path,
    )
    assert loaded.warnings == ()
    assert loaded.settings.reconcile.orphan_version_gap == 3
    assert loaded.settings.reconcile.max_stale_fraction == 1


@pytest.mark.parametrize("value", ["true", 1, "yes", [True]])
def test_destructive_switches_are_on_only_for_a_toml_true(tmp_path: Path, value: object) -> None:
    loaded = resolve_config(
        {"knowledgeBase": {"reconciliationAutoTombstone": value,
                           "reconciliationEnabled": value}},
        base_dir=tmp_path,
    )
    assert loaded.settings.reconcile.auto_tombstone is False
    assert loaded.settings.reconcile.enabled is False
    assert len(loaded.warnings) == 2
    on = resolve_config({"knowledgeBase": {"reconciliationAutoTombstone": True}},
                        base_dir=tmp_path)
    assert on.settings.reconcile.auto_tombstone is True


def test_unknown_key_is_warned_about_with_a_suggestion(tmp_path: Path) -> None:
    loaded = resolve_config({"knowledgeBase": {"remintervalms": 5, "frobnicate": 1}},
                            base_dir=tmp_path)
    messages = {w.key: w.message for w in loaded.warnings}
    assert "did you mean remIntervalMs?" in messages["remintervalms"]
    assert "unknown key knowledgeBase.frobnicate" in messages["frobnicate"]
    assert loaded.settings.drain.rem_interval_ms == 3_600_000


def test_knowledge_base_that_is_not_a_table_is_a_config_error(tmp_path: Path) -> None:
    # Defaults would put every store in ./.kb-data, away from the data the file meant.
    with pytest.raises(ConfigError, match=r"knowledgeBase must be a table \(\[knowledgeBase\]\), "
                                          "got int"):
        resolve_config({"knowledgeBase": 3}, base_dir=tmp_path, source=tmp_path / "kb.toml")


@pytest.mark.parametrize("text", [
    'dataDir = "/srv/kb"\nreconciliationEnabled = true\n',
    'dataDir = "/srv/kb"\n\n[knowledgeBase]\nremIntervalMs = 60000\n',
])
def test_knowledge_base_keys_at_the_top_level_stop_a_command_with_exit_2_naming_them(
        tmp_path: Path, text: str) -> None:
    # Unread, `dataDir` would put every store in ./.kb-data, away from the data the file meant
    # (a key written above the `[knowledgeBase]` line is outside the table, in TOML).
    config = write(tmp_path / "kb.toml", text)
    with pytest.raises(ConfigError, match=r"kb\.toml: dataDir(, reconciliationEnabled)? at the "
                                          r"top level of the file, not read: put (it|them) "
                                          r"under \[knowledgeBase\]"):
        load_config(str(config), environ={})
    done = run_module("daemons.drain", "--tick", "--config", str(config), home=tmp_path / "home")
    assert done.returncode == 2, done.stderr
    assert "dataDir" in done.stderr and "top level" in done.stderr
    assert not list(tmp_path.rglob(".kb-data")), "nothing was created on the defaults"


def test_other_tables_in_the_file_are_left_alone(tmp_path: Path) -> None:
    loaded = resolve_config({"other": {"x": 1}, "knowledgeBase": {}}, base_dir=tmp_path)
    assert loaded.warnings == ()


def test_syntax_error_names_file_line_and_column(tmp_path: Path) -> None:
    config = write(tmp_path / "kb.toml", "[knowledgeBase]\nremIntervalMs = = 3\n")
    with pytest.raises(ConfigError) as caught:
        load_config(str(config), environ={})
    message = str(caught.value)
    assert message.startswith(f"{config}:2:")
    assert "\n" not in message


def test_invalid_utf8_names_the_position(tmp_path: Path) -> None:
    config = tmp_path / "kb.toml"
    config.write_bytes(b"[knowledgeBase]\ndataDir = \"\xff\"\n")
    with pytest.raises(ConfigError, match=r"kb\.toml:2:12: config file is not valid UTF-8"):
        load_config(str(config), environ={})


def test_unreadable_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    folder = tmp_path / "kb.toml"
    folder.mkdir()
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(str(folder), environ={})


def test_a_missing_named_file_is_a_config_error_never_defaults_beside_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"absent\.toml: config file not found \(named by "
                                          r"--config\)"):
        load_config(str(tmp_path / "absent.toml"), environ={})
    with pytest.raises(ConfigError, match=r"named by \$KB_CONFIG"):
        load_config(None, environ={"KB_CONFIG": str(tmp_path / "absent.toml")})
    assert not (tmp_path / ".kb-data").exists()


def test_a_missing_named_file_stops_a_command_with_exit_2_and_creates_nothing(
        tmp_path: Path) -> None:
    done = run_module("daemons.drain", "--tick", "--config", str(tmp_path / "kb.tmol"),
                      home=tmp_path / "home")
    assert done.returncode == 2
    assert done.stderr.strip().endswith("config file not found (named by --config); create it, "
                                        "or name no file for the built-in defaults")
    assert list(tmp_path.iterdir()) == []


def test_settings_are_immutable(tmp_path: Path) -> None:
    s = resolve_config({}, base_dir=tmp_path).settings
    with pytest.raises(AttributeError):
        s.drain.rem_interval_ms = 5  # type: ignore[misc]


def test_readme_configuration_table_is_generated_from_the_keys() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert render_markdown_table() in readme, "run `make docs` to regenerate the README table"


def test_example_config_is_generated_from_the_keys_and_parses_to_defaults(tmp_path: Path) -> None:
    example = (ROOT / "config/kb.example.toml").read_text(encoding="utf-8")
    assert example == render_example_toml(), "run `make docs` to regenerate the example"
    names = {k.name for k in KEYS}
    key_lines = [
        line.removeprefix("# ") for line in example.splitlines()
        if line.removeprefix("# ").split(" = ")[0] in names
    ]
    assert {line.split(" = ")[0] for line in key_lines} == names
    # Uncommented, every line (but the <dataDir> placeholders) reads back as its default, with
    # the data folder one level up (the example lives in config/).
    document = tomllib.loads(
        "[knowledgeBase]\n" + "\n".join(x for x in key_lines if "<dataDir>" not in x)
    )
    config_dir = tmp_path / "config"
    loaded = resolve_config(document, base_dir=config_dir)
    assert loaded.warnings == ()
    assert loaded.settings == resolve_config({}, base_dir=tmp_path).settings


def test_the_example_copied_to_config_kb_toml_keeps_the_data_folder_of_no_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cp config/kb.example.toml config/kb.toml` must not move the data: the copy is found
    by the default lookup and names the same `.kb-data` as running with no file at all."""
    monkeypatch.chdir(tmp_path)
    without_file = load_config(None, environ={}).settings
    (tmp_path / "config").mkdir()
    shutil.copy(ROOT / "config/kb.example.toml", tmp_path / "config/kb.toml")
    with_copy = load_config(None, environ={})
    assert with_copy.warnings == ()
    assert with_copy.settings.source == (tmp_path / "config/kb.toml").resolve()
    assert with_copy.settings.data_dir == without_file.data_dir == (tmp_path / ".kb-data")
    assert with_copy.settings.state.graph_db_path == without_file.state.graph_db_path


@pytest.mark.parametrize("name", ["knowledgebase", "knowledge_base", "KnowledgeBase",
                                  "knowledge-base"])
def test_a_near_miss_table_without_a_real_one_is_a_config_error_naming_it(
    name: str, tmp_path: Path
) -> None:
    # Its keys would go unread and every store would be opened at its default place.
    source = tmp_path / "kb.toml"
    with pytest.raises(ConfigError) as caught:
        resolve_config({name: {"dataDir": "/srv/kb"}}, base_dir=tmp_path, source=source)
    assert str(caught.value) == (f"{source}: table [{name}] is not read: the table must be "
                                 "spelled [knowledgeBase] (table names are case-sensitive)")


def test_a_near_miss_table_beside_the_real_one_is_warned_about_by_name(tmp_path: Path) -> None:
    loaded = resolve_config({"knowledgebase": {"remIntervalMs": 5},
                             "knowledgeBase": {"remIntervalMs": 7}}, base_dir=tmp_path)
    assert [w.key for w in loaded.warnings] == ["knowledgebase"]
    assert "did you mean [knowledgeBase]" in loaded.warnings[0].message
    assert loaded.settings.drain.rem_interval_ms == 7  # the near miss is not read


def test_other_tables_are_not_taken_for_a_near_miss(tmp_path: Path) -> None:
    loaded = resolve_config({"knowledgeBase": {}, "tool": {"x": 1}, "knowledge": {}},
                            base_dir=tmp_path)
    assert loaded.warnings == ()
