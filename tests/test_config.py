"""Settings: shipped defaults, layering, and errors that name the key path."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from profstream.config import Settings, default_toml, load_settings
from profstream.errors import ConfigError

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def test_default_toml_states_every_default() -> None:
    """configs/default.toml equals the struct defaults and states every one that is not None."""
    shipped = msgspec.toml.decode(default_toml().encode())
    assert msgspec.convert(shipped, Settings) == Settings()
    for section, values in msgspec.to_builtins(Settings()).items():
        for key, value in values.items():
            if value is not None:
                assert shipped[section][key] == value, f"{section}.{key}"


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.toml")), ids=lambda p: p.name)
def test_every_shipped_config_validates(path: Path) -> None:
    """Each TOML file in configs/ loads as settings."""
    assert isinstance(load_settings(path), Settings)


def test_layering_order() -> None:
    """A user file overrides defaults, the environment overrides the file, CLI overrides the environment."""
    daemon = CONFIGS / "daemon.toml"
    assert load_settings(daemon).logging.format == "json"
    env = {"PROFSTREAM_LOGGING__FORMAT": "console", "PROFSTREAM_EXPORT__TIMELINE_LIMIT_MB": "100"}
    from_env = load_settings(daemon, env=env)
    assert from_env.logging.format == "console"
    assert from_env.export.timeline_limit_mb == 100
    from_cli = load_settings(daemon, env=env, overrides={"export": {"timeline_limit_mb": 42}})
    assert from_cli.export.timeline_limit_mb == 42


def test_unrelated_environment_is_ignored() -> None:
    """Variables without the prefix and section separator are not settings."""
    assert load_settings(env={"PROFSTREAM_HOME": "/x", "PATH": "/bin"}) == Settings()


@pytest.mark.parametrize(
    ("overrides", "key", "words"),
    [
        ({"export": {"timline_limit_mb": 1}}, "export.timline_limit_mb", "unknown key"),
        ({"exporter": {}}, "exporter", "unknown key"),
        ({"export": {"timeline_limit_mb": 0}}, "export.timeline_limit_mb", ">= 1"),
        ({"export": {"layout": "perfetto"}}, "export.layout", "perfetto"),
        ({"decode": {"on_invalid": "ignore"}}, "decode.on_invalid", "ignore"),
        ({"decode": {"advance_mb": -1}}, "decode.advance_mb", ">= 0"),
        ({"daemon": {"storage_limit_mb": 100}}, "daemon.storage_limit_mb", ">= 200"),
        ({"daemon": {"status_port": 70000}}, "daemon.status_port", "<= 65535"),
        ({"logging": {"verbosity": "loud"}}, "logging.verbosity", "int"),
    ],
)
def test_invalid_settings_name_the_key(overrides: dict[str, object], key: str, words: str) -> None:
    """Every invalid setting raises ConfigError naming its dotted key path."""
    with pytest.raises(ConfigError) as info:
        load_settings(overrides=overrides)
    assert info.value.key == key
    assert words in str(info.value)


def test_bad_toml_file_is_named(tmp_path: Path) -> None:
    """A user file that is not TOML is reported with its path."""
    bad = tmp_path / "bad.toml"
    bad.write_text("[export\nlayout = 1")
    with pytest.raises(ConfigError, match=r"bad\.toml"):
        load_settings(bad)


def test_missing_user_file_is_named(tmp_path: Path) -> None:
    """A user file that does not exist is reported with its path."""
    with pytest.raises(ConfigError, match=r"nope\.toml"):
        load_settings(tmp_path / "nope.toml")
