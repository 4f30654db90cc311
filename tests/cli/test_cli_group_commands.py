"""`gregor groups` and `--command-config` against a real broker: a running console consumer's
membership, offsets and lag in JSON, and reset-offsets' parse errors and plan."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import time

import pytest
from cli_helpers import gregor, one_line_error
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

from gregor.testing.broker import Broker

pytestmark = pytest.mark.client
QUIET = logging.getLogger("tests.cli.rdkafka.groups")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False


def test_groups_of_a_console_consumer_with_a_command_config(tmp_path):
    with Broker() as broker:
        b = ["-b", broker.bootstrap]
        assert gregor("topics", "create", "g-t", "--partitions", "2", *b).returncode == 0
        for p in (0, 1):
            lines = "".join(f"v{i}\n" for i in range(p, 10, 2))
            done = gregor("produce", "g-t", "--partition", str(p), *b, stdin=lines)
            assert done.returncode == 0, done.stderr
        props = tmp_path / "client.properties"
        props.write_text("# as kafka's tools take them\nclient.id = probe-cli\n")
        consumer = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gregor.cli.main",
                "consume",
                "g-t",
                "--group",
                "g1",
                "--from-beginning",
                "--command-config",
                str(props),
                *b,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                got = gregor("groups", "describe", "g1", "-o", "json", *b)
                # [] (and exit status 1) until the consumer has joined: no such group yet
                [g] = json.loads(got.stdout) or [{"state": "no such group", "offsets": []}]
                done_lag = [o["lag"] for o in g["offsets"]] == [0, 0]
                if g["state"] == "Stable" and done_lag:
                    break
                assert time.monotonic() < deadline, g
                time.sleep(0.5)
            [member] = g["members"]
            assert member["client_id"] == "probe-cli"  # the --command-config reached the client
            assert sorted((p["topic"], p["partition"]) for p in member["partitions"]) == [
                ("g-t", 0),
                ("g-t", 1),
            ]
            assert [(o["partition"], o["member_id"]) for o in g["offsets"]] == [
                (0, member["member_id"]),
                (1, member["member_id"]),
            ]
            admin = AdminClient({"bootstrap.servers": broker.bootstrap, "logger": QUIET})
            held = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("g1")])
            committed = {tp.partition: tp.offset for tp in held["g1"].result().topic_partitions}
            assert {o["partition"]: o["current_offset"] for o in g["offsets"]} == committed
            assert sum(committed.values()) == 10
            listed = gregor("groups", "list", "-o", "json", *b).json()
            assert {"group": "g1", "state": "Stable", "type": "Classic", "simple": False} in listed
            busy = gregor("groups", "reset-offsets", "g1", "--topic", "g-t", "--to-earliest", *b)
            one_line_error(
                busy,
                "gregor: assignments can only be reset if the group 'g1' is inactive, but the "
                "current state is Stable",
            )
        finally:
            consumer.send_signal(signal.SIGINT)
            out, err = consumer.communicate(timeout=30)
        assert consumer.returncode == 130 and "Traceback" not in err, err
        assert sorted(out.split()) == sorted(f"v{i}" for i in range(10))

        one_line_error(
            gregor(
                "groups", "reset-offsets", "g1", "--topic", "g-t", "--to-datetime", "yesterday", *b
            ),
            "gregor: --to-datetime: not an ISO-8601 time: 'yesterday' (e.g. 2024-05-01T12:00:00 "
            "(local time) or 2024-05-01T12:00:00+02:00)",
        )
        one_line_error(
            gregor("groups", "reset-offsets", "g1", "--topic", "g-t:7", "--to-earliest", *b),
            "gregor: --topic g-t:7: topic g-t has no partition 7 (it has 2: 0-1)",
        )
        plan = gregor(
            "groups",
            "reset-offsets",
            "g1",
            "--topic",
            "g-t:1",
            "--to-offset",
            "2",
            "--execute",
            "-o",
            "json",
            *b,
        ).json()
        assert plan == {
            "group": "g1",
            "executed": True,
            "offsets": [{"topic": "g-t", "partition": 1, "new_offset": 2}],
        }
        held = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("g1")])
        assert {tp.partition: tp.offset for tp in held["g1"].result().topic_partitions}[1] == 2
        deleted = gregor("groups", "delete", "g1", *b)
        assert (deleted.returncode, deleted.stdout) == (0, "deleted group g1\n")
        assert json.loads(gregor("groups", "list", "-o", "json", *b).stdout) == []
