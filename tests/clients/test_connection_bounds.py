"""What connections can cost a broker, on raw sockets: memory per idle connection, memory for
frames declared but not sent, `queued.max.request.bytes`, the connection counts
(`max.connections`, `max.connections.per.ip` and its overrides) and running out of descriptors.

Each broker is a process of its own (`gregor.Broker`); its memory is VmRSS from
/proc/<pid>/status and its CPU time utime+stime from /proc/<pid>/stat.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator

import confluent_kafka as ck
import pytest
from client_helpers import (
    consume_confluent,
    frame,
    parse_api_versions_v0,
    produce_all,
    recv_frame,
    request_header,
    wait_until,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from gregor import Broker
from gregor.broker.config import BrokerConfig
from gregor.metadata.config_defs import ConfigError
from gregor.protocol import api_keys
from gregor.protocol.messages import AlterClientQuotasRequest as A
from gregor.runtime.connection import MemoryPool
from gregor.runtime.process import raise_open_files_limit
from gregor.testing.raw_client import RawClient
from tests.metrics.helpers import scrape, total

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc")

MIB = 1024 * 1024


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def cpu_s(pid: int) -> float:
    """utime + stime of `pid`, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_files_limit(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return int(soft), int(hard)
    raise AssertionError("no Max open files")


@pytest.fixture
def many_files() -> Iterator[int]:
    """This test process may hold several thousand sockets (soft RLIMIT_NOFILE raised)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, 8192)
    if wanted < 3000:
        pytest.skip(f"the hard open files limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    try:
        yield max(soft, wanted)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def pid_of(broker: Broker) -> int:
    assert broker.process is not None
    return broker.process.pid


def connect(broker: Broker, source: str = "127.0.0.1") -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.settimeout(10)
    s.connect(("127.0.0.1", broker.port))
    return s


def api_versions(corr: int, pad: int = 0) -> bytes:
    """ApiVersions v0, with `pad` trailing bytes (which the broker ignores, as Kafka does)."""
    return frame(request_header(18, 0, corr, b"bounds") + b"\0" * pad)


def answers(s: socket.socket, corr: int = 7, timeout: float = 10.0) -> bool:
    """Whether the broker answers an ApiVersions on `s` within `timeout` s."""
    s.settimeout(timeout)
    try:
        s.sendall(api_versions(corr))
        got, error, _apis = parse_api_versions_v0(recv_frame(s))
    except (TimeoutError, OSError, AssertionError, struct.error):
        return False
    return got == corr and error == 0


def closed_by_broker(s: socket.socket, timeout: float = 5.0) -> bool:
    s.settimeout(timeout)
    try:
        s.sendall(api_versions(1))
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def served(s: socket.socket) -> socket.socket | None:
    """`s` if the broker answers on it (else it is closed)."""
    if answers(s, timeout=1):
        return s
    s.close()
    return None


def settle(pid: int, seconds: float = 1.0) -> float:
    time.sleep(seconds)
    return rss_mib(pid)


# -- memory ---------------------------------------------------------------------------------


IDLE_CONNECTIONS = 2500


def test_idle_connections_cost_little_and_their_memory_comes_back(many_files: int) -> None:
    """2,500 connections that each asked one ApiVersions and then idle: a few KiB each, and most
    of it back once they close."""
    with Broker() as broker:
        pid = pid_of(broker)
        warm = connect(broker)
        assert answers(warm)
        before = settle(pid, 0.5)
        crowd = [connect(broker) for _ in range(IDLE_CONNECTIONS)]
        for i, s in enumerate(crowd):
            s.sendall(api_versions(i))
        for i, s in enumerate(crowd):
            assert parse_api_versions_v0(recv_frame(s))[0] == i
        held = settle(pid, 0.5) - before
        for s in crowd:
            s.close()
        wait_until(lambda: answers(warm), 10, "the broker after the crowd left")
        after = settle(pid, 1.5) - before
        print(
            f"\n{IDLE_CONNECTIONS} idle connections: +{held:.1f} MiB held, +{after:.1f} MiB after close"
        )
        assert held < 100, f"{IDLE_CONNECTIONS} idle connections cost {held:.0f} MiB"
        assert after < max(25.0, held / 2), f"+{after:.0f} MiB still held after they closed"
        warm.close()


def test_half_sent_frames_cost_what_arrived_not_what_they_declare() -> None:
    """A dozen connections each declaring a 100 MB request (under socket.request.max.bytes) and
    sending 20 bytes of it: the broker must not allocate what they declare."""
    with Broker() as broker:
        pid = pid_of(broker)
        before = settle(pid, 0.5)
        liars = [connect(broker) for _ in range(12)]
        for i, s in enumerate(liars):
            s.sendall(
                struct.pack(">i", 100_000_000) + request_header(18, 0, i, b"bounds") + b"x" * 6
            )
        grown = settle(pid, 2.0) - before
        fresh = connect(broker)
        assert answers(fresh), "a new client is answered meanwhile"
        print(f"\n12 half frames declaring 100 MB each: +{grown:.1f} MiB")
        assert grown < 50, f"12 frames of 20 bytes declaring 100 MB each cost {grown:.0f} MiB"
        for s in liars + [fresh]:
            s.close()


def test_produce_requests_of_several_mib_are_stored_whole() -> None:
    """Requests above 2 MiB are received into memory backed as their bytes arrive: produced,
    patched in place and stored like any other, they read back byte for byte."""
    with Broker(
        {"message.max.bytes": str(16 * MIB), "socket.request.max.bytes": str(64 * MIB)}
    ) as broker:
        values = [os.urandom(3 * MIB + i) for i in range(3)]
        producer = ck.Producer(
            {"bootstrap.servers": broker.bootstrap, "message.max.bytes": 16 * MIB, "linger.ms": 50}
        )
        produce_all(producer, "big", [{"value": v, "partition": 0} for v in values])
        assert producer.flush(30) == 0
        got = consume_confluent(
            broker.bootstrap, "big", [0], len(values), **{"fetch.max.bytes": 64 * MIB}
        )
        assert [r.value for r in got] == values
        assert [r.offset for r in got] == [0, 1, 2]


def test_queued_max_request_bytes_makes_readers_wait_for_memory() -> None:
    """With queued.max.request.bytes = 1 MiB, a connection reading a 1 MiB request takes all of
    it: another connection's request waits, unanswered, until the big one has been handled."""
    config = {"socket.request.max.bytes": str(MIB), "queued.max.request.bytes": str(MIB)}
    with Broker(config) as broker:
        big = connect(broker)
        whole = api_versions(1, pad=MIB - 16)  # a 16-byte header: a frame of exactly 1 MiB
        assert len(whole) == MIB + 4
        big.sendall(whole[:4096])  # the size prefix and the first bytes: it holds the pool
        time.sleep(1.0)
        small = connect(broker)
        assert not answers(small, corr=2, timeout=1.5), "answered while the pool was empty"
        big.sendall(whole[4096:])
        assert parse_api_versions_v0(recv_frame(big))[0] == 1
        small.settimeout(10)
        assert parse_api_versions_v0(recv_frame(small))[0] == 2, "the waiting request proceeds"
        assert answers(small, corr=3)
        big.close()
        small.close()


def test_memory_pool_admits_while_any_is_left_and_wakes_waiters_in_order() -> None:
    scheduled: list = []
    pool = MemoryPool(100, scheduled.append)
    assert pool.try_allocate(150)  # any memory left: admitted, alone (Kafka's non-strict pool)
    assert pool.available == -50 and not pool.try_allocate(1)
    woken: list[str] = []
    pool.wait(lambda: woken.append("a") or pool.try_allocate(80))
    pool.wait(lambda: woken.append("b") or pool.try_allocate(80))
    pool.release(100)
    assert pool.available == 50 and not woken and not pool.try_allocate(1), "waiters go first"
    scheduled.pop()()
    assert woken == ["a"] and pool.available == -30  # b waits for a's memory
    pool.release(80)
    scheduled.pop()()
    assert woken == ["a", "b"] and pool.available == -30 and not scheduled


def test_queued_max_request_bytes_must_hold_the_largest_request() -> None:
    with pytest.raises(ConfigError, match="queued.max.request.bytes"):
        BrokerConfig.load(None, {"queued.max.request.bytes": "1000"})
    BrokerConfig.load(None, {"queued.max.request.bytes": "104857600"})
    with pytest.raises(ConfigError, match="max.connections.per.ip.overrides"):
        BrokerConfig.load(None, {"max.connections.per.ip.overrides": "127.0.0.1"})
    with pytest.raises(ConfigError, match="can be set to zero only"):
        BrokerConfig.load(None, {"max.connections.per.ip": "0"})
    BrokerConfig.load(
        None, {"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "::1:5"}
    )


# -- connection counts ----------------------------------------------------------------------


def test_max_connections_per_ip_and_overrides() -> None:
    """127.0.0.1 may hold 3 connections, 127.0.0.2 (an override) 5: the next one from each is
    closed at once, those before it keep being answered, and a closed one frees a slot."""
    config = {"max.connections.per.ip": "3", "max.connections.per.ip.overrides": "127.0.0.2:5"}
    with Broker(config, log_level="INFO") as broker:
        mine = [connect(broker) for _ in range(3)]
        assert all(answers(s) for s in mine)
        extra = connect(broker)
        assert closed_by_broker(extra), "a 4th connection from 127.0.0.1 was served"
        assert all(answers(s) for s in mine)
        others = [connect(broker, "127.0.0.2") for _ in range(5)]
        assert all(answers(s) for s in others)
        assert closed_by_broker(connect(broker, "127.0.0.2")), "a 6th from 127.0.0.2 was served"
        mine.pop().close()
        again = wait_until(lambda: served(connect(broker)), 10, "a slot freed by a close")
        assert "Rejected connection from 127.0.0.1" in broker.read_log()
        for s in mine + others + [again, extra]:
            s.close()


def test_max_connections_waits_for_a_free_slot() -> None:
    """At max.connections the broker stops accepting: a new client waits, unanswered, until a
    connection closes, then is served."""
    with Broker({"max.connections": "3"}, log_level="INFO") as broker:
        first = [connect(broker) for _ in range(3)]
        assert all(answers(s) for s in first)
        waiting = connect(broker)  # in the listen backlog
        assert not answers(waiting, corr=5, timeout=1.5), "a 4th connection was served"
        first.pop(0).close()
        waiting.settimeout(10)
        assert parse_api_versions_v0(recv_frame(waiting))[0] == 5
        assert all(answers(s) for s in first)
        assert broker.read_log().count("max.connections (3) reached") == 1
        for s in first + [waiting]:
            s.close()


def test_max_connections_per_ip_is_a_dynamic_broker_config() -> None:
    with Broker() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        entry = ConfigEntry(
            "max.connections.per.ip", "2", incremental_operation=AlterConfigOpType.SET
        )
        resource_ = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[entry])
        admin.incremental_alter_configs([resource_], request_timeout=15)[resource_].result()
        del admin  # its connections close

        def two_and_no_more() -> bool:
            held = [connect(broker) for _ in range(2)]
            try:
                return all(answers(s, timeout=2) for s in held) and closed_by_broker(
                    connect(broker)
                )
            finally:
                for s in held:
                    s.close()

        wait_until(two_and_no_more, 20, "max.connections.per.ip=2 applied", interval=0.3)


TWO_LISTENERS = {
    "listeners": "CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
    "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
}


def to(broker: Broker, listener: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", broker.listener_ports[listener]), timeout=10)
    return s


def waits(s: socket.socket) -> bool:
    """Whether `s` is left unanswered (in the listen backlog) for 1.5 s."""
    return not answers(s, corr=5, timeout=1.5)


def now_served(s: socket.socket) -> bool:
    """Whether the ApiVersions `waits` sent on `s` is answered (within 10 s)."""
    s.settimeout(10)
    return parse_api_versions_v0(recv_frame(s))[0] == 5


def test_max_connections_is_the_brokers_and_spares_the_inter_broker_listener() -> None:
    """max.connections counts both listeners' connections; the inter-broker listener is
    exempt from it (its own limit is max.connections too), the client listener is not."""
    with Broker({**TWO_LISTENERS, "max.connections": "3"}, log_level="INFO") as broker:
        internal = [to(broker, "INTERNAL") for _ in range(2)]
        client = [to(broker, "CLIENT")]
        assert all(answers(s) for s in internal + client)
        waiting_client = to(broker, "CLIENT")
        assert waits(waiting_client), "a 4th connection to the broker was served on CLIENT"
        internal.append(to(broker, "INTERNAL"))
        assert answers(internal[-1]), "the inter-broker listener was held to max.connections"
        waiting_internal = to(broker, "INTERNAL")
        assert waits(waiting_internal), "a 4th connection on INTERNAL was served"
        internal.pop(0).close()  # INTERNAL has a slot again; the broker is still over
        assert now_served(waiting_internal)
        assert waits(waiting_client)
        for s in internal:
            s.close()  # 2 left: CLIENT's and the INTERNAL one served last
        assert now_served(waiting_client)
        assert "max.connections (3) reached" in broker.read_log()
        for s in client + [waiting_client, waiting_internal]:
            s.close()


def test_a_listeners_own_max_connections() -> None:
    config = {**TWO_LISTENERS, "listener.name.client.max.connections": "2"}
    with Broker(config, log_level="INFO") as broker:
        client = [to(broker, "CLIENT") for _ in range(2)]
        assert all(answers(s) for s in client)
        waiting = to(broker, "CLIENT")
        assert waits(waiting), "a 3rd connection on CLIENT was served"
        internal = [to(broker, "INTERNAL") for _ in range(3)]
        assert all(answers(s) for s in internal), "INTERNAL was held to CLIENT's limit"
        client.pop().close()
        assert now_served(waiting)
        assert "listener.name.client.max.connections (2) reached" in broker.read_log()
        for s in client + internal + [waiting]:
            s.close()


def _alter(admin: AdminClient, key: str, value: str) -> None:
    entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
    resource_ = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[entry])
    admin.incremental_alter_configs([resource_], request_timeout=15)[resource_].result()


def test_connection_limits_of_listeners_are_dynamic() -> None:
    """listener.name.client.max.connections set with AlterConfigs holds CLIENT back; a lowered
    max.connections closes the least recently active connections of CLIENT, never those of
    the inter-broker listener."""
    with Broker(TWO_LISTENERS, log_level="INFO") as broker:
        internal = f"127.0.0.1:{broker.listener_ports['INTERNAL']}"
        admin = AdminClient({"bootstrap.servers": internal})
        _alter(admin, "listener.name.client.max.connections", "1")

        def one_and_no_more() -> bool:
            held = to(broker, "CLIENT")
            extra = to(broker, "CLIENT")
            try:
                return answers(held, timeout=2) and waits(extra)
            finally:
                held.close()
                extra.close()

        wait_until(one_and_no_more, 20, "listener.name.client.max.connections=1", interval=0.3)
        with pytest.raises(ck.KafkaException):
            _alter(admin, "listener.name.client.max.connections", "0")  # at least 1
        _alter(admin, "listener.name.client.max.connections", "5")
        probe = wait_until(lambda: served(to(broker, "CLIENT")), 20, "CLIENT's limit raised")
        probe.close()
        client = [to(broker, "CLIENT") for _ in range(2)]
        inter = [to(broker, "INTERNAL") for _ in range(2)]
        assert all(answers(s) for s in client + inter)
        _alter(admin, "max.connections", "1")
        assert all(closed_by_broker(s, timeout=20) for s in client)
        assert all(answers(s) for s in inter), "an inter-broker connection was closed"
        assert "max.connections is 1: closing" in broker.read_log()
        for s in client + inter:
            s.close()


THROTTLE = "kafka_server_socket_server_metrics_connection_accept_throttle_time"
BLOCKED = "kafka_network_acceptor_acceptorblockedpercent_total"
IP_THROTTLE = "kafka_server_socket_server_metrics_ip_connection_accept_throttle_time"
ACCEPT_RATE = "kafka_server_socket_server_metrics_connection_accept_rate"
ACCEPT_RATE_OF_127_0_0_3 = (ACCEPT_RATE, frozenset({("ip", "127.0.0.3")}))


def throttle_ms(broker: Broker, listener: str) -> float:
    """The listener's connection-accept-throttle-time (ms) as the metrics listener reports it."""
    assert broker.metrics_url is not None
    return total(scrape(broker.metrics_url), THROTTLE, listener=listener)


def blocked_ns(broker: Broker, listener: str) -> float:
    """How long the listener held accepted connections back, all told (ns)."""
    assert broker.metrics_url is not None
    return total(scrape(broker.metrics_url), BLOCKED, listener=listener)


def all_served_at_once(broker: Broker, listener: str, n: int) -> bool:
    """Open `n` connections to `listener` at once, each sending ApiVersions: whether every one is
    answered (a connection held back by a rate is served later, never refused)."""
    conns = [to(broker, listener) for _ in range(n)]
    try:
        for corr, s in enumerate(conns):
            s.sendall(api_versions(corr))
        for corr, s in enumerate(conns):
            s.settimeout(30)
            if parse_api_versions_v0(recv_frame(s))[0] != corr:
                return False
        return True
    finally:
        for s in conns:
            s.close()


# quota.window.num 2: the rate is measured over 1-2 s, so a burst is throttled at once
RATED = {**TWO_LISTENERS, "quota.window.num": "2", "metrics.listener": "http://127.0.0.1:0"}


def test_connections_over_the_creation_rate_are_delayed_and_all_served() -> None:
    """max.connection.creation.rate 2: six connections opened at once on the client listener
    are all served, those over the rate later (the listener's throttle time says they waited);
    the inter-broker listener is outside the broker-wide rate (its own is unset)."""
    config = {**RATED, "max.connection.creation.rate": "2"}
    config["listener.name.internal.max.connection.creation.rate"] = "1000"
    with Broker(config) as broker:
        assert throttle_ms(broker, "CLIENT") == 0
        assert all_served_at_once(broker, "CLIENT", 6)
        assert throttle_ms(broker, "CLIENT") > 0, "no connection was over the rate"
        assert blocked_ns(broker, "CLIENT") > 0, "no connection was held back"
        assert all_served_at_once(broker, "INTERNAL", 6)
        assert throttle_ms(broker, "INTERNAL") == 0, "INTERNAL was held to the broker's rate"
        assert blocked_ns(broker, "INTERNAL") == 0


def test_a_listeners_creation_rate_is_dynamic() -> None:
    """listener.name.client.max.connection.creation.rate set with IncrementalAlterConfigs
    delays CLIENT's connections (all served) and not INTERNAL's."""
    with Broker(RATED) as broker:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.listener_ports['INTERNAL']}"})
        with pytest.raises(ck.KafkaException):
            _alter(admin, "listener.name.client.max.connection.creation.rate", "0")  # at least 1
        _alter(admin, "listener.name.client.max.connection.creation.rate", "2")

        def delayed() -> bool:
            return all_served_at_once(broker, "CLIENT", 6) and blocked_ns(broker, "CLIENT") > 0

        wait_until(delayed, 60, "CLIENT's connections delayed", interval=0.3)
        assert throttle_ms(broker, "CLIENT") > 0
        assert blocked_ns(broker, "INTERNAL") == 0


def test_the_brokers_creation_rate_as_a_cluster_default() -> None:
    """max.connection.creation.rate set on the cluster default (broker-defaults) delays the
    client listener's connections, all served."""
    with Broker(RATED) as broker:
        _configs_cli(
            broker,
            "alter",
            "--entity-type",
            "broker-defaults",
            "--add-config",
            "max.connection.creation.rate=2",
        )

        def delayed() -> bool:
            return all_served_at_once(broker, "CLIENT", 6) and blocked_ns(broker, "CLIENT") > 0

        wait_until(delayed, 60, "CLIENT's connections delayed", interval=0.3)


def _ip_quota(broker: Broker, ip: str | None, rate: float) -> None:
    """AlterClientQuotas: `connection_creation_rate` of the `ip` entity `ip` (None: default)."""
    entity = [A.EntityData(entity_type="ip", entity_name=ip)]
    op = A.OpData(key="connection_creation_rate", value=rate, remove=False)
    request = A(entries=[A.EntryData(entity=entity, ops=[op])], validate_only=False)
    internal = f"127.0.0.1:{broker.listener_ports['INTERNAL']}"
    with RawClient(internal) as raw:
        answer = raw.call(api_keys.ALTER_CLIENT_QUOTAS, 1, request)
    assert [e.error_code for e in answer.entries] == [0]


def served_or_closed(broker: Broker, source: str, n: int) -> tuple[int, int]:
    """Open `n` connections from `source` to CLIENT at once, each sending ApiVersions: how many
    were answered, how many the broker closed unanswered."""
    conns = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((source, 0))
        s.settimeout(10)
        s.connect(("127.0.0.1", broker.listener_ports["CLIENT"]))
        conns.append(s)
    answered = closed = 0
    try:
        for corr, s in enumerate(conns):
            s.sendall(api_versions(corr))
        for corr, s in enumerate(conns):
            s.settimeout(30)
            try:
                if parse_api_versions_v0(recv_frame(s))[0] == corr:
                    answered += 1
            except (ConnectionError, AssertionError, struct.error):
                closed += 1
        return answered, closed
    finally:
        for s in conns:
            s.close()


def test_an_addresses_connection_creation_rate_closes_the_connections_over_it() -> None:
    """The `ip` client quota `connection_creation_rate` 2 on 127.0.0.2 (KIP-612): of six
    connections opened at once from there, those over the rate are closed unanswered (after
    their delay, as Kafka), the others served; another address is not bound."""
    with Broker(RATED) as broker:
        _ip_quota(broker, "127.0.0.2", 2)

        def some_closed() -> tuple[int, int] | None:
            answered, closed = served_or_closed(broker, "127.0.0.2", 6)
            return (answered, closed) if closed else None

        answered, closed = wait_until(some_closed, 30, "127.0.0.2's rate applied", interval=0.3)
        assert answered + closed == 6 and answered <= 3
        m = scrape(broker.metrics_url or "")
        assert total(m, IP_THROTTLE, listener="CLIENT") > 0
        # the address's connection-accept-rate, of the connections it was not refused
        assert total(m, ACCEPT_RATE, ip="127.0.0.2") > 0
        assert served_or_closed(broker, "127.0.0.3", 6) == (6, 0)
        assert ACCEPT_RATE_OF_127_0_0_3 not in scrape(broker.metrics_url or "")  # not bound
        assert broker.process is not None and broker.process.poll() is None


def _configs_cli(broker: Broker, *args: str) -> str:
    """`gregor configs ...` against `broker` (librdkafka cannot name the cluster default)."""
    done = subprocess.run(
        [sys.executable, "-m", "gregor.cli.main", "configs", *args, "-b", broker.bootstrap],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _described(admin: AdminClient, broker: str) -> dict[str, ConfigEntry]:
    resource_ = ConfigResource(ResourceType.BROKER, broker)
    got: dict[str, ConfigEntry] = admin.describe_configs([resource_], request_timeout=15)[
        resource_
    ].result()
    return got


def test_describe_configs_lists_the_listener_connection_configs_that_are_set() -> None:
    """Per-listener connection configs are listed when set, each with the layer that sets it
    (DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG) and its
    broker-wide config among the synonyms, as Kafka; unset ones are not listed."""
    static_key = "listener.name.internal.max.connection.creation.rate"
    with Broker({**TWO_LISTENERS, static_key: "1000"}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        _alter(admin, "listener.name.client.max.connections", "5")
        default_key = "listener.name.client.max.connection.creation.rate"
        _configs_cli(
            broker, "alter", "--entity-type", "broker-defaults", "--add-config", f"{default_key}=50"
        )

        def both_dynamic() -> dict[str, ConfigEntry] | None:
            got = _described(admin, "1")
            keys = {
                "listener.name.client.max.connections",
                "listener.name.client.max.connection.creation.rate",
            }
            return got if keys <= set(got) else None

        got = wait_until(both_dynamic, 20, "the dynamic listener configs described")
        listed = {k: (e.value, e.source) for k, e in got.items() if k.startswith("listener.name.")}
        assert listed == {
            "listener.name.client.max.connections": ("5", ConfigSource.DYNAMIC_BROKER_CONFIG.value),
            "listener.name.client.max.connection.creation.rate": (
                "50",
                ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value,
            ),
            static_key: ("1000", ConfigSource.STATIC_BROKER_CONFIG.value),
        }
        entry = got["listener.name.client.max.connections"]
        synonyms = [(s.name, s.source) for s in entry.synonyms.values()]
        assert synonyms[0] == (entry.name, ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        assert ("max.connections", ConfigSource.DEFAULT_CONFIG.value) in synonyms
        assert "listener.name.internal.max.connections" not in got
        [default] = json.loads(
            _configs_cli(broker, "describe", "--entity-type", "broker-defaults", "-o", "json")
        )
        listed = {c["name"]: (c["value"], c["source"]) for c in default["configs"]}
        assert listed == {default_key: ("50", "DYNAMIC_DEFAULT_BROKER_CONFIG")}


# -- descriptors ----------------------------------------------------------------------------


def test_running_out_of_descriptors_rests_the_listener_and_recovers(many_files: int) -> None:
    """A broker out of descriptors neither spins nor floods its log: connections beyond the
    limit wait in the backlog, connections it holds are still served, and once clients leave a
    new one is answered."""
    with Broker(log_level="INFO") as broker:
        pid = pid_of(broker)
        kept = [connect(broker) for _ in range(3)]
        assert all(answers(s) for s in kept)
        limit = len(os.listdir(f"/proc/{pid}/fd")) + 20
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, limit))  # soft and hard: no raise
        crowd = [connect(broker) for _ in range(60)]  # 20 accepted, 40 wait in the backlog
        time.sleep(0.3)
        cpu0, t0 = cpu_s(pid), time.monotonic()
        time.sleep(3.0)
        cpu, wall = cpu_s(pid) - cpu0, time.monotonic() - t0
        assert all(answers(s) for s in kept), "connections already open are still served"
        accept_lines = [line for line in broker.read_log().splitlines() if "accept" in line]
        print(
            f"\nout of descriptors for {wall:.1f} s: {cpu:.2f} s of CPU, {len(accept_lines)} accept log lines"
        )
        assert any("Too many open files" in line for line in accept_lines)
        assert len(accept_lines) < 50, f"{len(accept_lines)} log lines about accept"
        assert cpu < 0.5 * wall, f"{cpu:.1f} s of CPU in {wall:.1f} s"
        for s in crowd:
            s.close()
        late = connect(broker)
        assert answers(late, timeout=10), "a new client is answered once descriptors are free"
        for s in kept + [late]:
            s.close()


def lower_soft_limit() -> tuple[int, int]:
    """Set this process's soft RLIMIT_NOFILE below its hard limit (leaving room for the
    descriptors open now); returns the (soft, hard) to restore."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = max(256, len(os.listdir("/proc/self/fd")) + 256)
    if hard < 2 * low:
        pytest.skip(f"the hard open files limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))
    return soft, hard


def test_serve_raises_the_soft_open_files_limit_to_the_hard_limit() -> None:
    soft, hard = lower_soft_limit()
    try:
        broker = Broker().start()  # inherits the lowered soft limit
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    with broker:
        assert open_files_limit(pid_of(broker)) == (hard, hard)


def test_raise_open_files_limit() -> None:
    soft, hard = lower_soft_limit()
    try:
        assert raise_open_files_limit() == (hard, hard)
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
