"""Client quotas on a real broker: `gregor quotas` and DescribeClientQuotas / AlterClientQuotas
on the wire (Kafka's errors, validate_only), quotas kept across a restart, and enforcement seen
by librdkafka: a producer held to its producer_byte_rate while one of another client id on the
same broker is not, a consumer held by consumer_byte_rate, throttle_time_ms in the clients'
statistics. The rates are behaviour checks with generous bounds; the figures are printed."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "cli"))
from cli_helpers import gregor, one_line_error  # noqa: E402

from gregor.protocol import api_keys, errors  # noqa: E402
from gregor.protocol.messages import AlterClientQuotasRequest as A  # noqa: E402
from gregor.protocol.messages import DescribeClientQuotasRequest as D  # noqa: E402
from gregor.testing.broker import Broker  # noqa: E402
from gregor.testing.raw_client import RawClient  # noqa: E402

pytestmark = pytest.mark.client
MB = 1024 * 1024
INVALID = errors.BY_NAME["INVALID_REQUEST"].code


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    # A shorter window than Kafka's default (11 samples of 1 s): the allowance a client starts
    # with (the rate's window counts as num - 1 whole samples from the start) is spent, and
    # paid back, within the warm-up, so the rate measured after it is the steady one.
    config = {"quota.window.num": "4"}
    with Broker(config, data_dir=str(tmp_path_factory.mktemp("quotas"))) as b:
        yield b


def quotas(broker: Broker, *args: str):  # type: ignore[no-untyped-def]
    return gregor("quotas", *args, "-b", broker.bootstrap)


def described(broker: Broker, *args: str) -> list[dict[str, Any]]:
    run = quotas(broker, "describe", *args, "-o", "json")
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)  # type: ignore[no-any-return]


def alter_request(entity: list[tuple[str, str | None]], validate_only: bool, **ops: float) -> Any:
    return A(
        entries=[
            A.EntryData(
                entity=[A.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                ops=[A.OpData(key=k, value=v, remove=False) for k, v in ops.items()],
            )
        ],
        validate_only=validate_only,
    )


def test_cli_sets_describes_and_removes_quotas_and_they_survive_a_restart(broker: Broker) -> None:
    run = quotas(
        broker, "alter", "--entity-type", "users", "--entity-name", "alice",
        "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152",
    )  # fmt: skip
    assert (run.returncode, run.stdout) == (0, "altered the quotas of users alice\n"), run.stderr
    run = quotas(
        broker, "alter", "--entity-type", "users", "--entity-name", "alice", "--entity-type",
        "clients", "--entity-default", "--add-config", "request_percentage=12.5",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    alice = {"entity": [{"type": "users", "name": "alice"}]}
    both = {"entity": [{"type": "users", "name": "alice"}, {"type": "clients", "name": None}]}
    assert described(broker) == [
        {**both, "quotas": {"request_percentage": 12.5}},
        {**alice, "quotas": {"consumer_byte_rate": 2097152, "producer_byte_rate": 1048576}},
    ] or described(broker) == [
        {**alice, "quotas": {"consumer_byte_rate": 2097152, "producer_byte_rate": 1048576}},
        {**both, "quotas": {"request_percentage": 12.5}},
    ]
    # An entity named alone is matched strictly, as kafka-configs.sh --describe does.
    assert described(broker, "--entity-type", "users", "--entity-name", "alice") == [
        {**alice, "quotas": {"consumer_byte_rate": 2097152, "producer_byte_rate": 1048576}}
    ]
    assert described(broker, "--entity-type", "clients") == []
    run = quotas(
        broker, "alter", "--entity-type", "users", "--entity-name", "alice",
        "--delete-config", "consumer_byte_rate",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    broker.restart()
    assert described(broker, "--entity-type", "users", "--entity-name", "alice") == [
        {**alice, "quotas": {"producer_byte_rate": 1048576}}
    ]
    plain = quotas(broker, "describe", "--entity-type", "users", "--entity-name", "alice")
    assert plain.stdout.splitlines()[-1].split("\t") == [
        "users alice",
        "producer_byte_rate",
        "1048576",
    ], plain.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--add-config", "bogus_rate=5"],
            "cannot alter the quotas of clients x: invalid configuration key bogus_rate",
        ),
        (["--add-config", "producer_byte_rate=1.5"], "cannot be a fractional value"),
        (["--add-config", "producer_byte_rate=0"], "must be greater than 0"),
    ],
)
def test_cli_refusals_are_kafkas(broker: Broker, args: list[str], message: str) -> None:
    run = quotas(broker, "alter", "--entity-type", "clients", "--entity-name", "x", *args)
    assert run.returncode == 1 and message in run.stderr and "Traceback" not in run.stderr


def test_cli_needs_an_entity(broker: Broker) -> None:
    one_line_error(
        quotas(broker, "alter", "--add-config", "producer_byte_rate=5"),
        "gregor: name the entity: --entity-type users|clients with --entity-name X or "
        "--entity-default",
    )


def test_the_wire_validate_only_and_bad_filters(broker: Broker) -> None:
    with RawClient(broker.bootstrap) as raw:
        ent = [("client-id", "validated")]
        r = raw.call(
            api_keys.ALTER_CLIENT_QUOTAS, 1, alter_request(ent, True, producer_byte_rate=5.0)
        )
        assert [e.error_code for e in r.entries] == [errors.NONE]
        r = raw.call(
            api_keys.ALTER_CLIENT_QUOTAS, 0, alter_request([], False, producer_byte_rate=5.0)
        )
        assert [(e.error_code, e.error_message) for e in r.entries] == [
            (INVALID, "Invalid empty client quota entity")
        ]
        exact = D.ComponentData(entity_type="client-id", match_type=0, match="validated")
        r = raw.call(api_keys.DESCRIBE_CLIENT_QUOTAS, 1, D(components=[exact], strict=False))
        assert (r.error_code, r.entries) == (errors.NONE, [])  # validate_only wrote nothing
        bad = D.ComponentData(entity_type="client-id", match_type=0, match=None)
        r = raw.call(api_keys.DESCRIBE_CLIENT_QUOTAS, 0, D(components=[bad], strict=False))
        assert (r.error_code, r.entries) == (
            INVALID,
            None,
        ) and "MATCH_TYPE_EXACT" in r.error_message


class Load:
    """A producer sending as fast as it may, counting the bytes delivered after `start`."""

    def __init__(self, broker: Broker, client_id: str, topic: str) -> None:
        self.stats: list[dict[str, Any]] = []
        self.producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "client.id": client_id,
                "linger.ms": 5,
                "batch.size": 64 * 1024,  # requests small next to a second of the quota
                "queue.buffering.max.kbytes": 1024,
                "statistics.interval.ms": 500,
                "stats_cb": lambda s: self.stats.append(json.loads(s)),
            }
        )
        self.topic, self.delivered, self.counting = topic, 0, False
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _done(self, err: Any, msg: Any) -> None:
        if err is None and self.counting:
            self.delivered += len(msg.value())

    def _run(self) -> None:
        payload = b"q" * 10_000
        while not self.stop.is_set():
            try:
                self.producer.produce(self.topic, payload, on_delivery=self._done)
            except BufferError:
                self.producer.poll(0.005)
            self.producer.poll(0)
        self.producer.flush(30)

    def throttle_max_ms(self) -> int:
        return max(
            (
                b["throttle"]["max"]
                for s in self.stats
                for b in s["brokers"].values()
                if b["nodeid"] >= 0
            ),
            default=0,
        )


def test_a_producer_is_held_to_its_byte_rate_and_another_client_is_not(broker: Broker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic("limited", 1, 1), NewTopic("free", 1, 1)]).values():
        f.result()
    run = quotas(
        broker, "alter", "--entity-type", "clients", "--entity-name", "limited-producer",
        "--add-config", f"producer_byte_rate={MB}",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    limited = Load(broker, "limited-producer", "limited")
    free = Load(broker, "free-producer", "free")
    for load in (limited, free):
        load.thread.start()
    time.sleep(5)  # the first window's allowance is spent and paid back: the rate settles
    started = time.monotonic()
    limited.counting = free.counting = True
    time.sleep(10)  # the measure: 10 s
    limited.counting = free.counting = False
    elapsed = time.monotonic() - started
    for load in (limited, free):
        load.stop.set()
        load.thread.join(60)
    limited_rate, free_rate = limited.delivered / elapsed / MB, free.delivered / elapsed / MB
    print(
        f"limited-producer {limited_rate:.2f} MB/s (quota 1 MB/s), free-producer "
        f"{free_rate:.2f} MB/s, throttle max {limited.throttle_max_ms()} ms vs "
        f"{free.throttle_max_ms()} ms"
    )
    # The measure: 1 MB/s +-20% over 10 s (Kafka's sampled rate lets a little more
    # through than the quota: 1.13-1.14 MB/s measured here, as the results note says).
    assert 0.8 < limited_rate < 1.2
    assert free_rate > 3 * limited_rate
    assert limited.throttle_max_ms() > 0 and free.throttle_max_ms() == 0


def test_a_consumer_is_held_to_its_byte_rate(broker: Broker) -> None:
    # After the producer test: "free" holds far more than the quota lets through in 5 s.
    run = quotas(
        broker, "alter", "--entity-type", "clients", "--entity-name", "slow-reader",
        "--add-config", f"consumer_byte_rate={MB // 4}",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    stats: list[dict[str, Any]] = []
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "client.id": "slow-reader",
            "group.id": "slow-readers",
            "auto.offset.reset": "earliest",
            "fetch.max.bytes": MB,
            "max.partition.fetch.bytes": MB,
            "statistics.interval.ms": 500,
            "stats_cb": lambda s: stats.append(json.loads(s)),
        }
    )
    consumer.subscribe(["free"])
    consumed, deadline = 0, time.monotonic() + 6
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            consumed += len(msg.value())
    consumer.close()
    throttle = max(
        (b["throttle"]["max"] for s in stats for b in s["brokers"].values() if b["nodeid"] >= 0),
        default=0,
    )
    print(
        f"slow-reader consumed {consumed / MB:.2f} MB in 6 s (quota 0.25 MB/s), throttle max {throttle} ms"
    )
    # The window starts as 3 s long: 0.75 MB pass before the first throttle (and a response may
    # be 1 MB), then 0.25 MB/s: under 3 MB in 6 s, where an unthrottled consumer reads all "free" holds.
    assert consumed < 3 * MB
    assert throttle > 0


def test_a_throttled_connection_is_muted_and_others_are_not(broker: Broker) -> None:
    """KIP-219: the response comes at once with the throttle time, then the broker reads
    nothing more from that connection (whatever the client does) until the time is up. The
    quota is set on (user, client id): the user is the connection's principal, ANONYMOUS on a
    PLAINTEXT listener, as in Kafka."""
    from gregor.protocol.messages import ApiVersionsRequest, ProduceRequest

    run = quotas(
        broker, "alter", "--entity-type", "users", "--entity-name", "ANONYMOUS",
        "--entity-type", "clients", "--entity-name", "muted-client",
        "--add-config", "producer_byte_rate=1",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    with RawClient(broker.bootstrap, client_id="muted-client", timeout_s=10) as raw:
        answer = raw.call(
            api_keys.PRODUCE, 9, ProduceRequest(acks=1, timeout_ms=1000, topic_data=[])
        )
        assert answer.throttle_time_ms > 10_000  # tens of bytes against 1 byte/s
        raw.send(
            api_keys.API_VERSIONS,
            3,
            ApiVersionsRequest(client_software_name="t", client_software_version="1"),
        )
        raw.sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            raw.recv()
        with RawClient(broker.bootstrap, client_id="other-client") as other:
            versions = other.call(
                api_keys.API_VERSIONS,
                3,
                ApiVersionsRequest(client_software_name="t", client_software_version="1"),
            )
            assert versions.error_code == errors.NONE


def create_topics(raw: RawClient, *names: str, partitions: int = 10) -> list[int]:
    from gregor.protocol.messages import CreateTopicsRequest as C

    topics = [
        C.CreatableTopic(
            name=n, num_partitions=partitions, replication_factor=1, assignments=[], configs=[]
        )
        for n in names
    ]
    answer = raw.call(api_keys.CREATE_TOPICS, 7, C(topics=topics, timeout_ms=10_000))
    return [t.error_code for t in answer.topics]


def test_controller_mutations_over_their_rate_are_refused(broker: Broker) -> None:
    """controller_mutation_rate, strict (CreateTopics v6+): the request that takes the rate
    over the quota is admitted, the next gets THROTTLING_QUOTA_EXCEEDED and creates nothing;
    another client id is not affected. librdkafka (CreateTopics v4) is held back instead."""
    run = quotas(
        broker, "alter", "--entity-type", "clients", "--entity-name", "mutator",
        "--add-config", "controller_mutation_rate=1",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    throttled = errors.BY_NAME["THROTTLING_QUOTA_EXCEEDED"].code
    with RawClient(broker.bootstrap, client_id="mutator") as raw:
        assert create_topics(raw, "mutated-1") == [errors.NONE]
        assert create_topics(raw, "mutated-2", "mutated-3") == [throttled, throttled]
    with RawClient(broker.bootstrap, client_id="someone-else") as raw:
        assert create_topics(raw, "mutated-4") == [errors.NONE]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "client.id": "mutator"})
    topics = admin.list_topics(timeout=10).topics
    assert {"mutated-1", "mutated-4"} <= set(topics) and not {"mutated-2", "mutated-3"} & set(
        topics
    )


def test_with_acls_the_quota_apis_need_the_cluster_config_operations(tmp_path: Any) -> None:
    config = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
    with Broker(config, data_dir=str(tmp_path)) as b, RawClient(b.bootstrap) as raw:
        # User:ANONYMOUS has no ACL on the cluster: ALTER_CONFIGS and DESCRIBE_CONFIGS refused
        ent = [("client-id", "refused")]
        r = raw.call(
            api_keys.ALTER_CLIENT_QUOTAS, 1, alter_request(ent, False, producer_byte_rate=5.0)
        )
        assert [e.error_code for e in r.entries] == [errors.CLUSTER_AUTHORIZATION_FAILED]
        exact = D.ComponentData(entity_type="client-id", match_type=0, match="refused")
        r = raw.call(api_keys.DESCRIBE_CLIENT_QUOTAS, 1, D(components=[exact], strict=False))
        assert (r.error_code, r.entries) == (errors.CLUSTER_AUTHORIZATION_FAILED, None)
