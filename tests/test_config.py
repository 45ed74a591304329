"""Settings (D8): flags over GATEWAY_* variables over defaults, coercion, range checks."""

from __future__ import annotations

import math
from pathlib import Path

import msgspec
import pytest

from gateway import config
from gateway.config import SETTINGS_HELP, Settings, env_name, flag_name, load, parse_serve_args

DEFAULTS = Settings()


def test_every_setting_is_documented_and_named_consistently() -> None:
    fields = [f.name for f in msgspec.structs.fields(Settings)]
    assert sorted(SETTINGS_HELP) == sorted(fields)
    assert env_name("redis_url") == "GATEWAY_REDIS_URL"
    assert flag_name("max_body_bytes") == "--max-body-bytes"


def test_defaults_when_nothing_is_set() -> None:
    assert load({}, {}) == DEFAULTS
    assert load(None, {}) == DEFAULTS
    assert (DEFAULTS.port, DEFAULTS.keepalive_seconds, DEFAULTS.redis_url) == (8080, 15.0, None)
    # Variables of nothing we know are ignored.
    assert load({}, {"GATEWAY_NO_SUCH_SETTING": "1", "PORT": "1"}) == DEFAULTS


def test_flag_beats_env_beats_default() -> None:
    env = {"GATEWAY_PORT": "9001", "GATEWAY_HOST": "0.0.0.0"}
    s = load({"port": "9000", "host": None}, env)
    assert s.port == 9000  # flag over env
    assert s.host == "0.0.0.0"  # a flag left None falls back to the variable
    assert s.redis_prefix == DEFAULTS.redis_prefix  # neither: the default
    assert load({}, env).port == 9001


def test_flags_through_argparse_beat_env() -> None:
    env = {"GATEWAY_PORT": "9001", "GATEWAY_TEAM_RETENTION": "5"}
    s = parse_serve_args(["--port", "9000", "--redis-url", "redis://h:1/0"], env)
    assert (s.port, s.redis_url, s.team_retention) == (9000, "redis://h:1/0", 5)


def test_reads_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_READ_BATCH", "7")
    assert load({}).read_batch == 7
    assert load({}, {}).read_batch == DEFAULTS.read_batch  # an explicit env replaces os.environ


def test_int_and_float_coercion() -> None:
    s = load(
        {},
        {
            "GATEWAY_PORT": " 8081 ",
            "GATEWAY_TEAM_RETENTION": "3",
            "GATEWAY_INBOX_CLAIM_MS": "250",
            "GATEWAY_KEEPALIVE_SECONDS": "0.25",
        },
    )
    assert s.port == 8081 and isinstance(s.port, int)
    assert s.team_retention == 3 and s.inbox_claim_ms == 250
    assert s.keepalive_seconds == 0.25 and isinstance(s.keepalive_seconds, float)
    assert load({}, {"GATEWAY_KEEPALIVE_SECONDS": "2"}).keepalive_seconds == 2.0


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("1", True),
        ("true", True),
        ("TRUE", True),
        (" yes ", True),
        ("on", True),
        ("0", False),
        ("false", False),
        ("False", False),
        ("no", False),
        ("OFF", False),
    ],
)
def test_bool_coercion(raw: str, value: bool) -> None:
    assert load({}, {"GATEWAY_UVLOOP": raw}).uvloop is value
    assert load({"uvloop": raw}, {}).uvloop is value


@pytest.mark.parametrize("name", ["redis_url", "jwt_secret", "node_id"])
def test_optional_strings_empty_means_unset(name: str) -> None:
    # A value the setting accepts (a Redis URL must name a scheme the gateway serves).
    x = "redis://x" if name == "redis_url" else "x"
    assert getattr(load({}, {env_name(name): x}), name) == x
    assert getattr(load({}, {env_name(name): ""}), name) is None
    assert getattr(load({}, {env_name(name): "   "}), name) is None
    # An empty flag unsets a value that the environment sets.
    assert getattr(load({name: ""}, {env_name(name): x}), name) is None


def test_plain_strings() -> None:
    s = load({"redis_prefix": "tenant-a"}, {"GATEWAY_LOG_FORMAT": "json"})
    assert (s.redis_prefix, s.log_format) == ("tenant-a", "json")


def error_of(args: dict[str, str], env: dict[str, str]) -> str:
    with pytest.raises(ValueError) as info:
        load(args, env)
    return str(info.value)


def test_bad_bool_names_the_setting() -> None:
    assert "uvloop" in error_of({}, {"GATEWAY_UVLOOP": "maybe"})
    assert "uvloop" in error_of({"uvloop": "2"}, {})


POSITIVE = [
    "port",
    "team_retention",
    "run_retention",
    "max_body_bytes",
    "history_page",
    "max_queue_bytes",
    "read_batch",
    "read_block_ms",
    "inbox_claim_ms",
    "keepalive_seconds",
]


@pytest.mark.parametrize("name", POSITIVE)
@pytest.mark.parametrize("raw", ["0", "-1"])
def test_out_of_range_names_the_setting(name: str, raw: str) -> None:
    assert name in error_of({}, {env_name(name): raw})
    assert name in error_of({name: raw}, {})


@pytest.mark.parametrize("raw", ["4.9", "3600.5", "nan", "inf", "-60"])
def test_run_lease_bounds(raw: str) -> None:
    assert "run_lease_seconds" in error_of({}, {"GATEWAY_RUN_LEASE_SECONDS": raw})


def test_run_lease_default_and_bounds_accepted() -> None:
    assert load({}, {}).run_lease_seconds == 60.0
    for raw in ("5", "3600", "90.5"):
        assert load({}, {"GATEWAY_RUN_LEASE_SECONDS": raw}).run_lease_seconds == float(raw)


def test_port_upper_bound() -> None:
    assert load({}, {"GATEWAY_PORT": "65535"}).port == 65535
    assert "port" in error_of({}, {"GATEWAY_PORT": "65536"})


def test_log_format_must_be_known() -> None:
    assert "log_format" in error_of({}, {"GATEWAY_LOG_FORMAT": "xml"})


@pytest.mark.parametrize(
    ("name", "raw"),
    [("port", "abc"), ("team_retention", "1.5"), ("keepalive_seconds", "soon")],
)
def test_unparseable_number_names_the_setting(name: str, raw: str) -> None:
    assert name in error_of({}, {env_name(name): raw})


def test_keepalive_nan_is_rejected() -> None:
    assert "keepalive_seconds" in error_of({}, {"GATEWAY_KEEPALIVE_SECONDS": "nan"})


def test_unknown_log_level_is_rejected() -> None:
    assert "log_level" in error_of({}, {"GATEWAY_LOG_LEVEL": "loud"})


def test_settings_are_frozen() -> None:
    s = load({}, {})
    with pytest.raises(AttributeError):
        s.port = 1  # type: ignore[misc]
    with pytest.raises(AttributeError):
        config.Settings().redis_url = "redis://x"  # type: ignore[misc]
    assert s.port == DEFAULTS.port
    assert not math.isnan(s.keepalive_seconds)
    assert hash(s) == hash(load({}, {}))  # frozen structs are hashable values


def test_jwt_key_settings(tmp_path: Path) -> None:
    pem = tmp_path / "key.pem"
    pem.write_text("x")  # only existence is checked here; the authenticator parses it
    jwks = tmp_path / "jwks.json"
    jwks.write_text("{}")
    s = load(
        {"jwt_public_key_file": str(pem)},
        {
            "GATEWAY_JWT_JWKS_FILE": str(jwks),
            "GATEWAY_JWT_AUDIENCE": "gateway",
            "GATEWAY_JWT_ISSUERS": "https://a.example, https://b.example ,",
            "GATEWAY_JWT_LEEWAY_SECONDS": "30",
        },
    )
    assert (s.jwt_public_key_file, s.jwt_jwks_file) == (str(pem), str(jwks))
    assert s.jwt_audience == "gateway" and s.jwt_leeway_seconds == 30.0
    assert config.issuers(s) == ("https://a.example", "https://b.example")
    assert config.issuers(DEFAULTS) == ()
    assert DEFAULTS.jwt_leeway_seconds == 5
    assert (DEFAULTS.jwt_public_key_file, DEFAULTS.jwt_jwks_file, DEFAULTS.jwt_audience) == (
        None,
        None,
        None,
    )
    # Secrets stay environment-only; file paths and the rest have flags.
    assert sorted(config.ENV_ONLY) == ["jwt_secret", "redis_sentinel_password"]
    s = parse_serve_args(["--jwt-public-key-file", str(pem), "--jwt-leeway-seconds", "0"], {})
    assert s.jwt_public_key_file == str(pem) and s.jwt_leeway_seconds == 0


@pytest.mark.parametrize("raw", ["-1", "301", "nan", "inf", "soon"])
def test_jwt_leeway_bounds(raw: str) -> None:
    assert "jwt_leeway_seconds" in error_of({}, {"GATEWAY_JWT_LEEWAY_SECONDS": raw})
    assert load({}, {"GATEWAY_JWT_LEEWAY_SECONDS": "300"}).jwt_leeway_seconds == 300


@pytest.mark.parametrize("name", ["jwt_public_key_file", "jwt_jwks_file"])
def test_missing_key_file_names_the_setting(tmp_path: Path, name: str) -> None:
    missing = str(tmp_path / "nope")
    assert name in error_of({}, {env_name(name): missing})
    assert name in error_of({name: missing}, {})
    assert getattr(load({}, {env_name(name): ""}), name) is None
