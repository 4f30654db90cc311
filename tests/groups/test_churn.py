"""Group churn: 20 rounds of members joining and leaving while a producer keeps writing. Every
round must settle (each live member owns partitions, none shared, all covered) within a bound,
every acknowledged record must be consumed, and no member may fall into UNKNOWN_MEMBER_ID or
ILLEGAL_GENERATION loops (counted from librdkafka's own group debug log, which it writes to the
test's captured stderr)."""

from __future__ import annotations

import random
import threading
import time

import confluent_kafka as ck
import pytest
from group_helpers import Member, balanced, create_topic, pump, wait_until

pytestmark = pytest.mark.slow  # twenty rounds of rebalances

PARTITIONS = 6
ROUNDS = 20
SETTLE_S = 15.0


class Producer(threading.Thread):
    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
        self.topic = topic
        self.acked: set[int] = set()
        self.errors: list[str] = []
        self.stop = threading.Event()

    def _report(self, err: object, msg: ck.Message) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked.add(int(msg.value()))

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            self.p.produce(
                self.topic,
                value=str(i).encode(),
                partition=i % PARTITIONS,
                on_delivery=self._report,
            )
            i += 1
            self.p.poll(0.002)
        self.p.flush(30)


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_twenty_rounds_of_churn_while_producing(
    bootstrap: str, name: str, assignor: str, capfd: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(4)
    create_topic(bootstrap, name, PARTITIONS)
    conf = {
        "partition.assignment.strategy": assignor,
        "enable.auto.commit": True,  # commits what poll returned, also on revoke and close
        "auto.commit.interval.ms": 200,
        "debug": "cgrp",
    }
    producer = Producer(bootstrap, name)
    producer.start()
    live = [Member(bootstrap, name, name, **conf) for _ in range(2)]
    gone: list[Member] = []
    settle_times = []
    try:
        wait_until(
            lambda: balanced(live, PARTITIONS), SETTLE_S, "the first two members", pump(live)
        )
        for r in range(ROUNDS):
            if len(live) <= 1 or (len(live) < 4 and rng.random() < 0.5):
                live.append(Member(bootstrap, name, name, **conf))
            else:
                leaving = live.pop(rng.randrange(len(live)))
                leaving.close()
                gone.append(leaving)
            t0 = time.monotonic()
            wait_until(
                lambda: balanced(live, PARTITIONS),
                SETTLE_S,
                f"round {r} to settle ({len(live)} members)",
                pump(live),
            )
            settle_times.append(time.monotonic() - t0)
        producer.stop.set()
        producer.join(30)
        assert not producer.errors, producer.errors[:5]
        expected = producer.acked
        assert len(expected) > 1000, "the producer kept writing"

        def consumed() -> set[int]:
            return {n for m in live + gone for _, _, n in m.records}

        wait_until(lambda: consumed() >= expected, 30, "every acknowledged record", pump(live))
        everyone = live + gone
        stderr = capfd.readouterr().err
        for m in everyone:
            assert m.logs is not None
            m.logs.feed(stderr)
            assert m.logs.lines > 0, "the member's group debug log was read"
        assert not [e for m in everyone for e in m.errors], [m.errors for m in everyone]
        for m in everyone:
            assert m.logs is not None
            # A member may meet one of these when its group moved on under it (that is the
            # protocol working); a loop would be many.
            assert m.logs.counts["UNKNOWN_MEMBER_ID"] <= 2, m.logs.counts
            assert m.logs.counts["ILLEGAL_GENERATION"] <= 2, m.logs.counts
        print(
            {
                k: max(m.logs.counts[k] for m in everyone if m.logs)
                for k in ("UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION")
            }
        )
        print(
            f"{assignor}: rounds settled in max {max(settle_times):.2f}s, mean {sum(settle_times) / len(settle_times):.2f}s"
        )
    finally:
        producer.stop.set()
        for m in live:
            m.close()
