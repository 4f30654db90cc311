"""A broker of many partitions killed twice (SIGKILL), with a torn batch after the end of every
partition before each start: every acknowledged record is there, at its offset, and every torn
tail is cut; idempotent producers carry on; the epochs the broker answers follow its leaders."""

from __future__ import annotations

import glob
import os

import confluent_kafka as ck
from client_helpers import consume_confluent, ensure_topic

from gregor import Broker
from gregor.protocol.records.records import build_batch

PARTITIONS = 24


def produce_one_each(bootstrap: str, topic: str, tag: bytes, **conf: object) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **conf})
    failed: list[object] = []
    for part in range(PARTITIONS):
        p.produce(
            topic,
            value=b"%s-%d" % (tag, part),
            partition=part,
            on_delivery=lambda err, _msg: failed.append(err) if err else None,
        )
    assert p.flush(30) == 0 and failed == []


def tear_every_tail(broker: Broker, topic: str) -> None:
    """Half a batch after the last whole one of every partition: a write the kill tore."""
    torn = build_batch([(b"k", b"x" * 300)], base_offset=10**6)
    for part in range(PARTITIONS):
        active = sorted(
            glob.glob(os.path.join(broker.data_dir, "logs", f"{topic}-{part}", "*.log"))
        )
        with open(active[-1], "ab") as f:
            f.write(torn[: len(torn) // 2])


def test_every_acked_record_survives_two_kills_with_every_tail_torn() -> None:
    topic = "crashy"
    with Broker(config={"num.partitions": str(PARTITIONS)}) as broker:
        ensure_topic(broker.bootstrap, topic, PARTITIONS)
        produce_one_each(broker.bootstrap, topic, b"a")
        broker.kill()
        tear_every_tail(broker, topic)
        broker.start()
        produce_one_each(broker.bootstrap, topic, b"b", **{"enable.idempotence": True})
        broker.kill()  # every partition now ends where a leader epoch began: trimmed at start
        tear_every_tail(broker, topic)
        broker.start()
        produce_one_each(broker.bootstrap, topic, b"c", **{"enable.idempotence": True})
        for part in range(PARTITIONS):
            got = consume_confluent(broker.bootstrap, topic, [part], 3)
            assert [(r.offset, r.value) for r in got] == [
                (0, b"a-%d" % part),
                (1, b"b-%d" % part),
                (2, b"c-%d" % part),
            ]
        for part in range(PARTITIONS):
            d = os.path.join(broker.data_dir, "logs", f"{topic}-{part}")
            [log_file] = glob.glob(os.path.join(d, "*.log"))
            assert os.path.getsize(log_file) < 3 * 200  # three small batches, no torn bytes
            with open(os.path.join(d, "leader-epoch-checkpoint")) as f:
                lines = f.read().split()
            # version, count, then (epoch, start offset) pairs: none beyond the log end
            pairs = list(zip(lines[2::2], lines[3::2], strict=True))
            assert int(lines[1]) == len(pairs) and all(int(o) <= 2 for _, o in pairs)
