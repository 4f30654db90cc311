"""`gregor serve` configuration: bad values are refused by name, unknown keys are warned about."""

import subprocess
import sys

import pytest

from gregor.broker.config import BrokerConfig, parse_listener, read_properties
from gregor.metadata.config_defs import ConfigError


def test_bad_value_for_known_key_names_the_key(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gregor",
            "serve",
            "--data-dir",
            str(tmp_path),
            "--listen",
            "127.0.0.1:0",
            "--set",
            "log.segment.bytes=lots",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "log.segment.bytes" in proc.stderr
    assert "lots" in proc.stderr


def test_out_of_range_value_is_refused():
    with pytest.raises(ConfigError, match="num.partitions"):
        BrokerConfig.load(None, {"num.partitions": "0"})


def test_unknown_key_is_a_warning_not_an_error(caplog):
    config = BrokerConfig.load(None, {"no.such.config": "1", "num.partitions": "4"})
    assert config.get_int("num.partitions") == 4
    assert any("no.such.config" in r.getMessage() for r in caplog.records)


def test_server_properties_file_then_overrides(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text(
        "# comment\nnum.partitions=3\nlog.dirs = /a,/b\nlisteners: PLAINTEXT://0.0.0.0:19092\n"
        "auto.create.topics.enable=\\\nfalse\n"
    )
    assert read_properties(str(props))["auto.create.topics.enable"] == "false"
    config = BrokerConfig.load(str(props), {"num.partitions": "7"})
    assert config.get_int("num.partitions") == 7
    assert config.log_dirs == ["/a", "/b"]
    assert config.listener() == ("0.0.0.0", 19092)
    assert config.get_bool("auto.create.topics.enable") is False


def test_listener_forms():
    assert parse_listener("PLAINTEXT://127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_listener("localhost:9092") == ("localhost", 9092)
    assert parse_listener("PLAINTEXT://[::1]:9093") == ("::1", 9093)
    with pytest.raises(ConfigError):
        parse_listener("PLAINTEXT://nohost")
