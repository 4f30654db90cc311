"""How `gregor perf` builds its client config from flags and properties files."""

import argparse

import pytest

from gregor.cli import main as cli_main
from gregor.cli import perf
from gregor.cli.errors import CliError
from gregor.cli.perf_client import client_config


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    perf.register(sub)
    return parser.parse_args(["perf", *argv])


def test_later_sources_win_and_flags_win_over_files(tmp_path):
    command = tmp_path / "command.properties"
    command.write_text("bootstrap.servers=from-command:1\nclient.id=cmd\nacks=0\nlinger.ms=1\n")
    consumer = tmp_path / "consumer.properties"
    consumer.write_text("! Kafka's comment\nacks: 1\ngroup.id=from-file\n")
    args = parse(
        "consume", "--topic", "t", "--messages", "1",
        "--command-config", str(command), "--consumer.config", str(consumer),
        "--consumer-props", "linger.ms=9", "auto.offset.reset=latest",
    )  # fmt: skip
    conf = client_config(args, "consumer")
    assert conf["bootstrap.servers"] == "from-command:1"  # no -b: the file's
    assert conf["client.id"] == "cmd"
    assert conf["acks"] == "1"  # the consumer file over --command-config
    assert conf["linger.ms"] == "9"  # props over both files
    assert conf["auto.offset.reset"] == "latest"  # over the tool's default
    assert conf["group.id"] == "from-file"

    args = parse(
        "consume", "--topic", "t", "--messages", "1", "-b", "flag:2", "--group", "g",
        "--consumer.config", str(consumer),
    )  # fmt: skip
    conf = client_config(args, "consumer")
    assert (conf["bootstrap.servers"], conf["group.id"]) == ("flag:2", "g")


def test_defaults():
    conf = client_config(parse("consume", "--topic", "t", "--messages", "1"), "consumer")
    assert conf["bootstrap.servers"] == "127.0.0.1:9092"
    assert conf["group.id"].startswith("perf-consumer-")
    assert conf["auto.offset.reset"] == "earliest"
    produce = parse("produce", "--topic", "t", "--num-records", "1", "--record-size", "1")
    assert client_config(produce, "producer") == {"bootstrap.servers": "127.0.0.1:9092"}


def test_a_missing_file_or_a_bare_key_is_one_line(tmp_path):
    args = parse(
        "produce", "--topic", "t", "--num-records", "1", "--record-size", "1",
        "--command-config", str(tmp_path / "nope"),
    )  # fmt: skip
    with pytest.raises(CliError, match=r"^--command-config .*nope: No such file or directory$"):
        client_config(args, "producer")
    args = parse(
        "produce", "--topic", "t", "--num-records", "1", "--record-size", "1",
        "--producer-props", "acks",
    )  # fmt: skip
    with pytest.raises(CliError, match="expects KEY=VALUE, got 'acks'"):
        client_config(args, "producer")


def test_registered_in_the_gregor_command(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli_main.main(["perf", "produce", "--help"])
    assert exit_.value.code == 0
    assert "kafka-producer-perf-test.sh" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["0", "nan", "fast"])
def test_a_throughput_that_would_never_send_is_a_usage_error(value, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse("produce", "--topic", "t", "--num-records", "1", "--record-size", "1",
              "--throughput", value)  # fmt: skip
    assert exit_.value.code == 2
    assert "--throughput" in capsys.readouterr().err
    assert (
        parse(
            "produce",
            "--topic",
            "t",
            "--num-records",
            "1",
            "--record-size",
            "1",
            "--throughput",
            "-1",
        ).throughput
        == -1
    )
