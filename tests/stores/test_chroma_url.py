"""`chromaUrl`'s grammar, the server token's sources, and the redaction of what holds them."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.base.config.chroma_server import (
    InvalidChromaUrl,
    auth_header,
    parse_chroma_url,
    token_problem,
)
from core.base.config.config import Secret, resolve_config
from core.base.rules.errors import ConfigError
from core.base.runtime.config_file import load_config


@pytest.mark.parametrize(("written", "canonical", "host", "port", "prefix"), [
    ("http://127.0.0.1:8000", "http://127.0.0.1:8000", "127.0.0.1", 8000, ""),
    ("HTTP://127.0.0.1:8000", "http://127.0.0.1:8000", "127.0.0.1", 8000, ""),
    ("Https://chroma.example.com", "https://chroma.example.com", "chroma.example.com", 443, ""),
    ("http://chroma", "http://chroma", "chroma", 80, ""),
    ("http://chroma_db:8000/", "http://chroma_db:8000", "chroma_db", 8000, ""),
    ("https://[::1]:8000", "https://[::1]:8000", "::1", 8000, ""),
    ("http://[2001:db8::5]/", "http://[2001:db8::5]", "2001:db8::5", 80, ""),
    ("https://proxy.example:8443/kb/chroma/", "https://proxy.example:8443/kb/chroma",
     "proxy.example", 8443, "/kb/chroma"),
    ("http://10.0.0.7/chroma", "http://10.0.0.7/chroma", "10.0.0.7", 80, "/chroma"),
])
def test_every_ordinary_server_url_form_is_accepted(
    written: str, canonical: str, host: str, port: int, prefix: str
) -> None:
    server = parse_chroma_url(written)
    assert (server.url, server.host, server.effective_port, server.path_prefix) == (
        canonical, host, port, prefix)
    assert server.tls == canonical.startswith("https")
    settings = resolve_config({"knowledgeBase": {"chromaUrl": written}},
                              base_dir=Path("/")).settings
    assert settings.chroma.server_mode and settings.chroma.url == canonical


@pytest.mark.parametrize(("written", "reason"), [
    ("http://u:p@h:1", "user-info"),
    ("http://token@h:1", "user-info"),
    ("http://h:1/?x=1", "query or fragment"),
    ("http://h:1/#frag", "query or fragment"),
    ("http://h:1 ", "leading or trailing whitespace"),
    ("\thttp://h:1", "leading or trailing whitespace"),
    ("http://h :1", "whitespace or a control character"),
    ("h:1", "must start with http:// or https://"),
    ("ws://h:1", "must start with http:// or https://"),
    ("http://", "names no host"),
    ("http://[::1", "cannot be parsed"),
    ("http://[not-v6]:1", "cannot be parsed"),
    ("http://fe80::1:8000", "must be in brackets"),
    ("http://h:abc", "is not a :port"),
    ("http://h:65536", "not in 1-65535"),
    ("http://h/a/../b", "segment"),
    ("http://h/a%2Fb", "percent-escape"),
    ("http://-bad-.example", "not a host name"),
])
def test_each_malformed_url_is_refused_saying_what_is_wrong(written: str, reason: str) -> None:
    with pytest.raises(InvalidChromaUrl, match=reason.replace("(", r"\(").replace(")", r"\)")):
        parse_chroma_url(written)


def test_a_token_is_sent_as_bearer_or_as_chromas_own_header() -> None:
    assert auth_header("Authorization", "t0k") == {"Authorization": "Bearer t0k"}
    assert auth_header("X-Chroma-Token", "t0k") == {"X-Chroma-Token": "t0k"}
    assert token_problem("t0k") is None
    assert token_problem("") == "it is empty"
    assert token_problem("two words") is not None and "two" not in str(token_problem("a b"))


def write(folder: Path, text: str) -> Path:
    config = folder / "kb.toml"
    config.write_text("[knowledgeBase]\n" + text, encoding="utf-8")
    return config


def test_the_token_file_wins_over_the_environment_and_loses_its_final_newline(
    tmp_path: Path,
) -> None:
    (tmp_path / "token").write_text("from-file\n")
    config = write(tmp_path, 'chromaUrl = "http://127.0.0.1:9"\nchromaAuthTokenFile = "token"\n')
    settings = load_config(str(config), environ={"KB_CHROMA_TOKEN": "from-env"}).settings
    assert settings.chroma.token == Secret("from-file")
    assert settings.chroma.token is not None and settings.chroma.token.reveal() == "from-file"


def test_the_environment_token_is_used_when_no_file_is_named(tmp_path: Path) -> None:
    config = write(tmp_path, 'chromaUrl = "http://127.0.0.1:9"\n')
    settings = load_config(str(config), environ={"KB_CHROMA_TOKEN": "from-env"}).settings
    assert settings.chroma.token is not None and settings.chroma.token.reveal() == "from-env"
    with pytest.raises(ConfigError, match=r"\$KB_CHROMA_TOKEN: .* visible ASCII") as caught:
        load_config(str(config), environ={"KB_CHROMA_TOKEN": "bad token"})
    assert "bad token" not in str(caught.value)


def test_connection_keys_without_a_server_are_warned_about_and_not_read(tmp_path: Path) -> None:
    config = write(tmp_path, 'chromaAuthTokenFile = "absent"\nchromaCaFile = "absent.pem"\n')
    loaded = load_config(str(config), environ={"KB_CHROMA_TOKEN": "unused"})
    assert loaded.settings.chroma.token is None
    assert [w.key for w in loaded.warnings] == ["chromaAuthTokenFile", "chromaCaFile"]


def test_settings_repr_shows_no_token_and_no_webhook_credentials(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("TOKEN-7d1e\n")
    config = write(tmp_path, (
        'chromaUrl = "https://chroma.example:8443/kb"\nchromaAuthTokenFile = "token"\n'
        "[[knowledgeBase.alertRules]]\n"
        'metric = "reconcileEvents"\nthreshold = 1\nseverity = "warning"\n'
        'channels = ["webhook:https://hookuser:HOOKPASS@hooks.example/p/SECRETPATH?k=QSECRET"]\n'
        "[[knowledgeBase.alertRules]]\n"
        'metric = "nope"\nchannels = ["webhook:https://u:BADRULEPASS@h/x"]\n'))
    settings = load_config(str(config), environ={}).settings
    assert settings.chroma.token is not None
    shown = repr(settings) + str(settings) + repr(settings.chroma.token) + \
        str(settings.chroma.token) + f"{settings!r:>5}"
    for secret in ("TOKEN-7d1e", "hookuser", "HOOKPASS", "SECRETPATH", "QSECRET",
                   "BADRULEPASS"):
        assert secret not in shown, secret
    assert "url='https://chroma.example:8443/kb'" in shown
    assert "rules=<1 valid, 1 skipped rules>" in shown
    assert "token=Secret(<redacted>)" in shown


# --- memoryCoreChromaUrl: the memory core on a server of its own -----------------------------


def test_the_memory_core_is_on_chroma_urls_store_unless_a_server_of_its_own_is_named(
    tmp_path: Path,
) -> None:
    alone = load_config(str(write(tmp_path, 'chromaUrl = "http://127.0.0.1:8000"\n')),
                        environ={}).settings
    assert alone.chroma.memory_core_url == "http://127.0.0.1:8000"
    assert not alone.chroma.memory_core_apart
    # The same server written another way is still one store.
    same = load_config(str(write(tmp_path, 'chromaUrl = "http://127.0.0.1:8000"\n'
                                           'memoryCoreChromaUrl = "HTTP://127.0.0.1:8000/"\n')),
                       environ={}).settings
    assert not same.chroma.memory_core_apart
    split = load_config(str(write(tmp_path, 'chromaUrl = "http://127.0.0.1:8000"\n'
                                            'memoryCoreChromaUrl = "http://127.0.0.1:8001"\n')),
                        environ={}).settings
    assert split.chroma.memory_core_apart and split.chroma.memory_core_url == "http://127.0.0.1:8001"
    assert split.chroma.memory_core_collections == {"neo-agent-memory", "neo-agent-sessions"}
    embedded = load_config(str(write(tmp_path, "")), environ={}).settings
    assert embedded.chroma.memory_core_url == "" and not embedded.chroma.memory_core_apart


@pytest.mark.parametrize("written", ["http://u:pw@h:8001", "h:8001", "http://h:8001 ", ""])
def test_an_invalid_memory_core_url_is_a_configuration_error_naming_the_key(
    tmp_path: Path, written: str
) -> None:
    config = write(tmp_path, f'chromaUrl = "http://h:8000"\nmemoryCoreChromaUrl = "{written}"\n'
                   if written else 'chromaUrl = "http://h:8000"\nmemoryCoreChromaUrl = 8001\n')
    with pytest.raises(ConfigError, match=r"knowledgeBase\.memoryCoreChromaUrl: expected") as e:
        load_config(str(config), environ={})
    assert str(config.resolve()) in str(e.value) and "pw" not in str(e.value)


def test_a_memory_core_server_without_chroma_url_is_refused_not_read_beside_an_embedded_kb(
    tmp_path: Path,
) -> None:
    config = write(tmp_path, 'memoryCoreChromaUrl = "http://127.0.0.1:8001"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(str(config), environ={})
    message = str(caught.value)
    assert message.startswith(f"{config.resolve()}: knowledgeBase.memoryCoreChromaUrl: ")
    assert "chromaUrl is empty" in message and "\n" not in message


def test_with_two_servers_a_collection_name_cannot_be_on_both(tmp_path: Path) -> None:
    config = write(tmp_path, 'chromaUrl = "http://h:8000"\nmemoryCoreChromaUrl = "http://h:8001"\n'
                             'knowledgeBaseCollection = "neo-agent-sessions"\n')
    with pytest.raises(ConfigError, match="must not also be memoryCollection or summaryCollection"):
        load_config(str(config), environ={})
