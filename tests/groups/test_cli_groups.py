"""`gregor groups list | describe | reset-offsets | delete` against a real broker."""

from __future__ import annotations

import json
import time
import uuid

import confluent_kafka as ck
import pytest
from group_helpers import Member, create_topic, produce, pump, wait_until

from gregor.cli.main import main


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["groups", *args])
    out, err = capsys.readouterr()
    return code, out, err


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return [
            tp.offset
            for tp in c.committed(
                [ck.TopicPartition(topic, p) for p in range(partitions)], timeout=10
            )
        ]
    finally:
        c.close()


def test_groups_cli(
    bootstrap: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    g = f"cli-{uuid.uuid4().hex[:6]}"
    topic = g
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 0, 20, 2)
    m = Member(bootstrap, g, topic, **{"client.id": "cli-client"})
    try:
        wait_until(lambda: len(m.records) >= 20, 20, "20 records", pump([m]))
        m.consumer.commit(
            offsets=[ck.TopicPartition(topic, 0, 4), ck.TopicPartition(topic, 1, 10)],
            asynchronous=False,
        )
        code, out, _ = run(capsys, "list", "-b", bootstrap)
        assert code == 0 and g in out and "Stable" in out
        code, out, _ = run(capsys, "describe", g, "-b", bootstrap, "--output", "table")
        assert code == 0 and "Stable" in out and "range" in out
        rows = [line.split("│") for line in out.splitlines() if line.startswith("│")]
        cells = [[c.strip() for c in r[1:-1]] for r in rows]
        assert [c[1:6] for c in cells] == [
            [topic, "0", "4", "10", "6"],
            [topic, "1", "10", "10", "0"],
        ]
        assert all(c[7] == "cli-client" and c[8] == "/127.0.0.1" for c in cells)
        code, out, _ = run(capsys, "describe", g, "-b", bootstrap, "--output", "json")
        [d] = json.loads(out)
        assert (d["state"], d["assignor"], len(d["members"])) == ("Stable", "range", 1)
        code, _, err = run(
            capsys, "reset-offsets", g, "--topic", topic, "--to-earliest", "-b", bootstrap
        )
        assert code == 1 and "inactive" in err and "Stable" in err
    finally:
        m.close()
    code, out, err = run(
        capsys, "reset-offsets", g, "--topic", topic, "--to-earliest", "-b", bootstrap
    )
    assert code == 0 and f"{g}\t{topic}\t0\t0\n" in out and "dry run" in err
    assert committed(bootstrap, g, topic, 2) == [4, 10], "a dry run changes nothing"
    code, _, _ = run(
        capsys, "reset-offsets", g, "--topic", topic, "--to-earliest", "--execute", "-b", bootstrap
    )
    assert code == 0 and committed(bootstrap, g, topic, 2) == [0, 0]
    code, _, _ = run(
        capsys,
        "reset-offsets",
        g,
        "--topic",
        f"{topic}:1",
        "--to-offset",
        "99",
        "--execute",
        "-b",
        bootstrap,
    )
    assert code == 0 and committed(bootstrap, g, topic, 2) == [0, 10], "clamped to the log end"
    code, _, _ = run(
        capsys, "reset-offsets", g, "--topic", topic, "--to-latest", "--execute", "-b", bootstrap
    )
    assert code == 0 and committed(bootstrap, g, topic, 2) == [10, 10]
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 3600))
    code, _, _ = run(
        capsys,
        "reset-offsets",
        g,
        "--topic",
        topic,
        "--to-datetime",
        stamp,
        "--execute",
        "-b",
        bootstrap,
    )
    assert code == 0 and committed(bootstrap, g, topic, 2) == [0, 0], (
        "records are newer than an hour ago"
    )
    code, out, _ = run(capsys, "describe", g, "-b", bootstrap, "--output", "json")
    [d] = json.loads(out)
    assert (d["state"], d["members"]) == ("Empty", [])
    code, out, err = run(capsys, "delete", g, "no-such-group", "-b", bootstrap)
    assert code == 1 and f"deleted group {g}" in out and "GROUP_ID_NOT_FOUND" in err
    code, out, _ = run(capsys, "list", "-b", bootstrap)
    assert g not in out
    assert committed(bootstrap, g, topic, 2) == [ck.OFFSET_INVALID] * 2
