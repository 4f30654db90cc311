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


def test_one_properties_reader_for_broker_and_clients(tmp_path):
    """The broker's server.properties and the CLI's client files are read by the same reader:
    every separator Java allows, comments, continuations, escaped separators in keys."""
    from gregor.cli import connect

    props = tmp_path / "both.properties"
    props.write_text(
        "# comment\n! comment\n\nlisteners=PLAINTEXT://127.0.0.1:0\n"
        "num.partitions : 2 \nlog.retention.hours   24\nlog.dirs = /a,\\\n    /b\n"
        "odd\\:key=1\nbare.key\nlast.line=x\\"
    )
    expected = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "num.partitions": "2",
        "log.retention.hours": "24",
        "log.dirs": "/a,/b",
        "odd:key": "1",
        "bare.key": "",
        "last.line": "x",
    }
    assert read_properties(str(props)) == expected
    assert connect.read_properties(str(props)) == expected
    config = BrokerConfig.load(str(props))
    assert config.get_int("num.partitions") == 2
    assert config.log_dirs == ["/a", "/b"]


def test_properties_escapes_follow_java(tmp_path):
    """Escapes as java.util.Properties reads them: a unicode escape, an escaped backslash at a
    line's end (no continuation), escaped separators kept in a value; a malformed unicode
    escape is one error naming the file and the line, for the broker and for the commands."""
    from gregor.cli import connect
    from gregor.cli.errors import CliError

    props = tmp_path / "escapes.properties"
    props.write_text(
        'sasl.jaas.config=user_alice="caf\\u00e9"\n'
        "ssl.keystore.location=C:\\\\certs\\\\\n"
        "next.key = a\\=b\\:c \n"
    )
    assert read_properties(str(props)) == {
        "sasl.jaas.config": 'user_alice="caf\u00e9"',
        "ssl.keystore.location": "C:\\certs\\",
        "next.key": "a=b:c",
    }
    bad = tmp_path / "bad.properties"
    bad.write_text("num.partitions=1\nclient.id=\\u12\n")
    with pytest.raises(ConfigError, match=r"bad.properties: line 2: malformed"):
        read_properties(str(bad))
    with pytest.raises(CliError, match=r"^--command-config .*bad.properties: line 2: malformed"):
        connect.read_properties(str(bad))


def test_unreadable_properties_name_each_callers_flag(tmp_path):
    from gregor.cli import connect
    from gregor.cli.errors import CliError

    missing = tmp_path / "nope.properties"
    with pytest.raises(FileNotFoundError):
        read_properties(str(missing))
    with pytest.raises(CliError, match=r"^--producer.config .*nope.properties: No such file"):
        connect.read_properties(str(missing), "--producer.config")
    binary = tmp_path / "bin.properties"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(CliError, match=r"^--command-config .*bin.properties: not a text file$"):
        connect.read_properties(str(binary))


def test_listen_sets_the_first_client_listener_and_keeps_the_others(tmp_path):
    from argparse import Namespace

    from gregor.cli.serve import _load

    listeners = "CONTROLLER://127.0.0.1:9094,INTERNAL://0.0.0.0:9092,EXTERNAL://0.0.0.0:9093"
    args = Namespace(
        config=None,
        listen="127.0.0.1:0",
        data_dir=str(tmp_path),
        set=[f"listeners={listeners}"],
        metrics=None,
    )
    config = _load(args)
    assert config is not None
    assert config.values["listeners"] == (
        "CONTROLLER://127.0.0.1:9094,INTERNAL://127.0.0.1:0,EXTERNAL://0.0.0.0:9093"
    )
    args.set = []
    assert _load(args).values["listeners"] == "PLAINTEXT://127.0.0.1:0"
