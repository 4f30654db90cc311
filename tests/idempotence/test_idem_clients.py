"""Real idempotent producers against gregor.Broker: confluent-kafka (librdkafka) with
enable.idempotence=true and kafka-python's default producer (idempotent) each send 10,000+
records through a proxy that loses every 10th Produce response (lossy_proxy.py: the batch is
written, the producer retries it), also while the broker is restarted under them, cleanly
(SIGTERM) and by SIGKILL. Every record must be acknowledged, and each partition must then hold
exactly the records sent to it, once each, in the order they were sent: no duplicates from the
retries, no gaps. (Without the broker's duplicate check these tests fail: the retries of the
lost acks are written twice.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from lossy_proxy import LossyProxy, free_port

from gregor import Broker

PARTITIONS = 3
# Small segments: the stream rolls many times, so snapshots are written and pruned under load.
CONFIG = {"num.partitions": str(PARTITIONS), "log.segment.bytes": "262144"}
TOTAL = 12_000
PACE_S = 0.03  # a pause every 100 records: about 4 s of producing


class ProxiedBroker(Broker):
    """A broker on a fixed port that advertises the proxy's address."""

    def __init__(self, proxy: LossyProxy) -> None:
        self.listen_port = free_port()
        config = {**CONFIG, "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"}
        super().__init__(config=config, port=self.listen_port, log_level="INFO")

    def start(self) -> Broker:
        self.port = self.listen_port
        super().start()
        self.port = self.listen_port  # the ready file names the advertised (proxy) address
        return self


@pytest.fixture
def proxy() -> Iterator[LossyProxy]:
    px = LossyProxy(every=10)
    yield px
    px.close()


@pytest.fixture
def broker(proxy: LossyProxy) -> Iterator[Broker]:
    with ProxiedBroker(proxy) as b:
        proxy.start(b.listen_port)
        yield b


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)], request_timeout=15)[topic].result()


def value(i: int) -> bytes:
    return b"%07d-" % i + b"x" * (i % 90)


def read_all(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    c = ck.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "idem-check", "enable.auto.commit": False}
    )
    out: dict[int, list[bytes]] = {}
    try:
        for p in range(PARTITIONS):
            lo, hi = c.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)
            assert lo == 0
            c.assign([ck.TopicPartition(topic, p, 0)])
            got: list[bytes] = []
            deadline = time.monotonic() + 60
            while len(got) < hi:
                assert time.monotonic() < deadline, f"partition {p}: read {len(got)} of {hi}"
                m = c.poll(1)
                if m is None:
                    continue
                assert m.error() is None, m.error()
                assert m.offset() == len(got), "offsets are not dense"
                got.append(m.value())
            out[p] = got
    finally:
        c.close()
    return out


def check_exactly_once(bootstrap: str, topic: str, total: int) -> None:
    stored = read_all(bootstrap, topic)
    for p in range(PARTITIONS):
        want = [value(i) for i in range(total) if i % PARTITIONS == p]
        got = stored[p]
        dups = len(got) - len(set(got))
        missing = len(set(want) - set(got))
        assert (dups, missing) == (0, 0), f"partition {p}: {dups} duplicates, {missing} missing"
        assert got == want, f"partition {p}: records out of order"


class Restarter:
    """Restarts the broker once `trigger()` says enough records were acknowledged."""

    def __init__(self, broker: Broker, clean: bool | None) -> None:
        self.broker, self.clean = broker, clean
        self.acked_at_restart = -1

    def maybe(self, acked: int) -> None:
        if self.clean is not None and self.acked_at_restart < 0 and acked >= TOTAL // 4:
            self.acked_at_restart = acked
            self.broker.restart(clean=self.clean)

    def check(self) -> None:
        if self.clean is not None:
            print(f"restart (clean={self.clean}) after {self.acked_at_restart} of {TOTAL} acks")
            assert 0 <= self.acked_at_restart < 0.75 * TOTAL, "the restart came too late"


RESTARTS = [None, True, False]
RESTART_IDS = ["steady", "sigterm", "sigkill"]


@pytest.mark.parametrize("restart", RESTARTS, ids=RESTART_IDS)
def test_confluent_idempotent_producer(
    broker: Broker, proxy: LossyProxy, restart: bool | None
) -> None:
    topic = "confluent-idem"
    create_topic(broker.bootstrap, topic)
    p = ck.Producer(
        {
            "bootstrap.servers": proxy.bootstrap,
            "enable.idempotence": True,
            "linger.ms": 2,
            "batch.num.messages": 200,
            "message.timeout.ms": 120_000,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 200,
        }
    )
    acked: list[int] = []
    failed: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            failed.append(str(err))
        else:
            acked.append(msg.offset())

    restarter = Restarter(broker, restart)
    done = threading.Event()

    def produce() -> None:
        for i in range(TOTAL):
            while True:
                try:
                    p.produce(
                        topic, value=value(i), partition=i % PARTITIONS, on_delivery=on_delivery
                    )
                    break
                except BufferError:
                    p.poll(0.01)
            if i % 100 == 99:
                p.poll(PACE_S)  # a stream over a few seconds, not one burst
        done.set()

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    while not done.is_set():
        restarter.maybe(len(acked))
        time.sleep(0.002)
    t.join()
    assert p.flush(120) == 0, "records still undelivered"
    assert failed == [], failed[:5]
    assert len(acked) == TOTAL
    restarter.check()
    print(f"acks lost by the proxy: {proxy.dropped} of {proxy.produce_responses}")
    assert proxy.dropped >= 3
    check_exactly_once(broker.bootstrap, topic, TOTAL)


@pytest.mark.parametrize("restart", RESTARTS, ids=RESTART_IDS)
def test_kafka_python_default_producer(
    broker: Broker, proxy: LossyProxy, restart: bool | None
) -> None:
    from kafka import KafkaProducer

    topic = "kafka-python-idem"
    create_topic(broker.bootstrap, topic)
    p = KafkaProducer(
        bootstrap_servers=proxy.bootstrap,
        linger_ms=2,
        reconnect_backoff_ms=20,
        reconnect_backoff_max_ms=200,
        request_timeout_ms=30_000,
        delivery_timeout_ms=120_000,
    )  # library defaults otherwise: idempotent, acks=all
    assert p.config["enable_idempotence"]
    restarter = Restarter(broker, restart)
    futures = []
    for i in range(TOTAL):
        futures.append(p.send(topic, value=value(i), partition=i % PARTITIONS))
        if i % 100 == 99:
            restarter.maybe(sum(f.is_done for f in futures))
            time.sleep(PACE_S)
    p.flush(120)
    results = [f.get(timeout=60) for f in futures]
    assert len(results) == TOTAL
    p.close(5)
    restarter.check()
    print(f"acks lost by the proxy: {proxy.dropped} of {proxy.produce_responses}")
    assert proxy.dropped >= 3
    check_exactly_once(broker.bootstrap, topic, TOTAL)
