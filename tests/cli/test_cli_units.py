"""The pieces of the `gregor` command that need no broker: error text, output formats, and the
parsing of properties files, config lists, times and partitions."""

from __future__ import annotations

import argparse
import json
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from gregor.cli import configs, connect, errors, output, specs
from gregor.cli.errors import CliError
from gregor.cli.main import main

pytestmark = pytest.mark.unit


def test_kafka_errors_read_as_text():
    bad_value = KafkaError(
        KafkaError.INVALID_CONFIG,
        "Invalid value abc for configuration retention.ms: not a valid long",
    )
    assert errors.describe(KafkaException(bad_value)) == 'retention.ms: not a valid long ("abc")'
    exists = KafkaError(KafkaError.TOPIC_ALREADY_EXISTS, "Topic 'orders' already exists.")
    assert errors.describe(exists) == "topic 'orders' already exists"
    generic = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
    assert errors.describe(generic) == "unknown topic or partition (UNKNOWN_TOPIC_OR_PART)"
    assert errors.error_text(3) == "unknown topic or partition (UNKNOWN_TOPIC_OR_PARTITION)"
    assert errors.error_text(40, "Invalid value x for configuration a.b: no") == 'a.b: no ("x")'


def test_plain_output_is_tab_separated_and_never_cut():
    wide = "w" * 300
    text = output.render_plain(
        [
            output.Fields([("cluster id", "abc"), ("controller", None)]),
            output.Table(["id", "value", "ok"], [[1, wide, True], [2, "a\tb", False]]),
            output.Table(["topic"], [["t1"], ["t2"]], header=False),
        ]
    )
    assert text == (
        f"cluster id\tabc\ncontroller\t-\n\nid\tvalue\tok\n1\t{wide}\tyes\n2\ta\\tb\tno\n\nt1\nt2\n"
    )


def test_table_output_wraps_wide_values(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "40")
    name = "a-topic-name-much-wider-than-the-terminal-" + "x" * 50 + "-end"
    args = argparse.Namespace(output="table")
    output.emit(args, [name], [output.Table(["topic", "partition"], [[name, 0]])])
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 40
    cells = "".join(line.split("│")[1].strip() for line in lines if line.count("│") == 3)
    assert name in cells  # every character kept, wrapped across lines


def test_json_output_and_the_default_off_a_terminal(capsys):
    doc = [{"topic": "t", "partition": 0}]
    output.emit(argparse.Namespace(output="json"), doc, [output.Table(["topic"], [["t"]])])
    assert json.loads(capsys.readouterr().out) == doc
    # capsys' stdout is not a terminal: plain
    output.emit(argparse.Namespace(output=None), doc, [output.Table(["topic", "p"], [["t", 0]])])
    assert capsys.readouterr().out == "topic\tp\nt\t0\n"


def test_help_documents_the_json_fields(capsys):
    with pytest.raises(SystemExit):
        main(["offsets", "get", "--help"])
    text = capsys.readouterr().out
    assert "--output json prints:" in text
    assert '{"topic": str, "partition": int, "offset": int|null' in text


def test_java_properties(tmp_path):
    path = tmp_path / "c.properties"
    path.write_text(
        "# comment\n! also a comment\n\nsecurity.protocol=PLAINTEXT\n"
        "client.id : probe\nsasl.mechanism   PLAIN\nlong.value = a,\\\n   b\n"
    )
    assert connect.read_properties(str(path)) == {
        "security.protocol": "PLAINTEXT",
        "client.id": "probe",
        "sasl.mechanism": "PLAIN",
        "long.value": "a,b",
    }


def test_reach_reason_from_librdkafka_errors():
    refused = (
        "127.0.0.1:29199/bootstrap: Connect to ipv4#127.0.0.1:29199 failed: "
        "Connection refused (after 0ms in state CONNECT)"
    )
    unresolved = (
        "nosuchhost.invalid:9092/bootstrap: Failed to resolve 'nosuchhost.invalid:9092': "
        "Name or service not known (after 0ms in state CONNECT)"
    )
    assert connect._reason(refused) == "connection refused"
    assert connect._reason(unresolved) == "name or service not known"


def test_config_lists_keep_bracketed_commas():
    assert configs.split_configs("a=1,b=[x,y],c=2") == ["a=1", "b=x,y", "c=2"]
    assert configs.split_configs("k1, k2") == ["k1", "k2"]
    assert configs.split_configs("") == []


def test_times():
    assert [specs.parse_time(t) for t in ("earliest", "latest", "max-timestamp", "-1")] == [
        -2,
        -1,
        -3,
        -1,
    ]
    assert specs.parse_time("1714557600000") == 1714557600000
    assert specs.parse_time("2024-05-01T10:00:00+00:00") == 1714557600000
    assert specs.parse_time("2024-05-01T10:00:00Z") == 1714557600000
    with pytest.raises(CliError, match=r"^--time: not an ISO-8601 time: '2024-13-01T00:00'"):
        specs.parse_time("2024-13-01T00:00")
    with pytest.raises(CliError, match=r"^--time: 'soon' is not earliest, latest"):
        specs.parse_time("soon")
    with pytest.raises(CliError, match=r"^--time: -7 is not a time"):
        specs.parse_time("-7")


def test_partition_specs():
    md = SimpleNamespace(
        topics={"t": SimpleNamespace(error=None, partitions={0: None, 1: None, 2: None})}
    )
    assert specs.topic_partitions(md, ["t"], "--topic") == [("t", 0), ("t", 1), ("t", 2)]
    assert specs.topic_partitions(md, ["t:2,0", "t:0"], "--topic") == [("t", 2), ("t", 0)]
    with pytest.raises(
        CliError, match=r"^--topic t:x: partitions must be numbers, e.g. --topic t:0,1$"
    ):
        specs.topic_partitions(md, ["t:x"], "--topic")
    with pytest.raises(CliError, match=r"^--topic u: topic 'u' does not exist$"):
        specs.topic_partitions(md, ["u"], "--topic")


def test_main_turns_failures_into_one_line_and_a_status(capsys, monkeypatch):
    def broken(args):
        raise CliError("something is wrong")

    def interrupted(args):
        raise KeyboardInterrupt

    def crashed(args):
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT))

    for func, status, line in (
        (broken, 1, "gregor: something is wrong\n"),
        (interrupted, 130, ""),
        (crashed, 1, "gregor: timed out (_TIMED_OUT)\n"),
        (lambda args: {}["key"], 1, "gregor: KeyError: 'key' (--verbose shows where)\n"),
    ):
        monkeypatch.setattr("gregor.cli.main.build_parser", lambda f=func: _parser(f))
        assert main(["x"]) == status
        captured = capsys.readouterr()
        assert (captured.out, captured.err) == ("", line)


def _parser(func):
    p = argparse.ArgumentParser(prog="gregor")
    p.add_argument("x")
    p.add_argument("--verbose", action="store_true")  # as every client command has
    p.set_defaults(func=func)
    return p


def test_a_usage_mistake_is_one_line_with_status_2(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["topics", "list", "--timeout", "soon"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err == (
        "gregor topics list: argument --timeout: not a number of seconds: 'soon' (e.g. 10) "
        "(see gregor topics list --help)\n"
    )


@pytest.mark.parametrize(
    ("bootstrap", "why"),
    [
        ("127.0.0.1:abc", "'127.0.0.1:abc': the port must be a number from 1 to 65535"),
        ("127.0.0.1:9092,h:70000", "'h:70000': the port must be a number from 1 to 65535"),
        ("127.0.0.1:0", "'127.0.0.1:0': the port must be a number from 1 to 65535"),
        (" , ", "no broker address"),
    ],
)
def test_a_bootstrap_that_is_not_host_port_is_a_usage_mistake(bootstrap, why, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["offsets", "get", "t", "-b", bootstrap])
    assert stopped.value.code == 2
    assert capsys.readouterr().err == (
        f"gregor offsets get: argument --bootstrap-server/-b: {why} (e.g. -b 127.0.0.1:9092) "
        "(see gregor offsets get --help)\n"
    )


@pytest.mark.parametrize("bootstrap", ["h", "h:1,h2:65535", "PLAINTEXT://h:9092", "[::1]:9092"])
def test_bootstrap_forms_the_client_library_takes_pass(bootstrap):
    assert specs.bootstrap_servers(bootstrap) == bootstrap
