"""Active-active on a real broker with confluent-kafka: two regions simulated as `orders` (the
local writes of region A) and `B.orders` (region B's writes, as a mirror would copy them),
written at the same time by two producers with node ids 1 and 2, region B's clock 2 s ahead,
over 200 keys (values, deletes, version vectors). The resolver's view equals an oracle computed
from every write, whichever order it reads the topics in, and so does its compacted
`.resolved` topic; a writer that read region B's writes before writing wins over them despite
B's clock; a record stamped an hour ahead is refused by update() and by the resolver."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from gregor import Broker
from gregor.clock import SYSTEM_CLOCK
from gregor.hlc import (
    ClockSkewError,
    HlcProducer,
    HybridClock,
    ResolverProcess,
    Timestamp,
    Write,
    observe,
)
from gregor.hlc import version_vector as vvs
from gregor.hlc.resolver import maximal
from gregor.hlc.timestamp import HEADER

pytestmark = pytest.mark.client

KEYS = [f"key-{i:03d}".encode() for i in range(200)]
ROUNDS = 3
SKEW_MS = 2_000
HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    b = Broker(config={"num.partitions": "4"})
    b.start()
    try:
        yield b
    finally:
        b.close()


def create_topics(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, num_partitions=4) for n in names])
    for f in futures.values():
        f.result(30)


def writer(p: HlcProducer, topic: str, node: int, keys: list[bytes], log: list, seed: int):
    """ROUNDS passes over the keys in a random order: a value, or now and then a delete; each
    write's version vector follows the writer's own previous write of the key. A failure is
    appended to `log` for the test's thread to see."""
    try:
        _write(p, topic, node, keys, log, seed)
    except BaseException as exc:
        log.append(exc)


def _write(p: HlcProducer, topic: str, node: int, keys: list[bytes], log: list, seed: int):
    rng = random.Random(seed)
    vv: dict[bytes, vvs.VersionVector] = {}
    for r in range(ROUNDS):
        for key in rng.sample(keys, len(keys)):
            value = None if rng.random() < 0.1 else f"{node}:{r}:{key.decode()}".encode()
            vv[key] = vvs.bump(vv.get(key, ()), node)
            ts = p.produce(topic, value=value, key=key, vv=vv[key], on_delivery=_check)
            log.append(Write(key, value, ts, vv[key]))
            p.poll(0)
    assert p.flush(30) == 0


def _check(err, msg) -> None:
    assert err is None, err


def read_all(bootstrap: str, topic: str) -> list[ck.Message]:
    """Every record of `topic`, up to its high watermarks now."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "t", "enable.auto.commit": False})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {}
        tps = []
        for p in parts:
            low, high = c.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)
            if high > low:
                ends[p] = high
                tps.append(ck.TopicPartition(topic, p, low))
        c.assign(tps)
        out = []
        while ends:
            for m in c.consume(500, 1.0):
                assert not m.error(), m.error()
                out.append(m)
                if m.offset() + 1 >= ends.get(m.partition(), 0):
                    ends.pop(m.partition(), None)
        return out
    finally:
        c.close()


@pytest.fixture(scope="module")
def regions(broker: Broker):
    """Both regions written; returns (local topic, mirror topic, every write, the keys region A
    rewrote after reading region B)."""
    uid = uuid.uuid4().hex[:8]
    local, mirror = f"orders-{uid}", f"B.orders-{uid}"
    create_topics(broker.bootstrap, local, mirror)
    conf = {"bootstrap.servers": broker.bootstrap, "linger.ms": 2}
    clock_a = HybridClock(1)
    clock_b = HybridClock(2, lambda: SYSTEM_CLOCK.now_ms() + SKEW_MS)
    a, b = HlcProducer(clock_a, conf), HlcProducer(clock_b, conf)
    log_a: list[Write] = []
    log_b: list[Write] = []
    threads = [
        threading.Thread(target=writer, args=(a, local, 1, KEYS, log_a, 1)),
        threading.Thread(target=writer, args=(b, mirror, 2, KEYS, log_b, 2)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(isinstance(w, Write) for w in log_a + log_b), log_a + log_b
    assert len(log_a) == len(log_b) == ROUNDS * len(KEYS)
    # Region A reads B's writes (as it would read B.orders), then rewrites 50 keys: its clock
    # moves past what it read, and its version vectors say it has seen B's writes.
    seen: dict[bytes, vvs.VersionVector] = {}
    for m in read_all(broker.bootstrap, mirror):
        observe(m, clock_a)
        seen[m.key()] = vvs.merge(seen.get(m.key(), ()), vvs.decode(dict(m.headers())["hlc-vv"]))
    assert clock_a.last.physical_ms >= max(w.hlc.physical_ms for w in log_b)
    own = {w.key: w.vv for w in log_a}
    rewritten = KEYS[:50]
    for key in rewritten:
        vv = vvs.bump(vvs.merge(own[key], seen[key]), 1)
        ts = a.produce(local, value=b"after-reading-B:" + key, key=key, vv=vv, on_delivery=_check)
        log_a.append(Write(key, b"after-reading-B:" + key, ts, vv))
    assert a.flush(30) == 0
    return local, mirror, log_a + log_b, rewritten


def oracle(writes: list[Write]) -> dict[bytes, Write]:
    """Per key, the write with the greatest HLC (never equal here: each node's are distinct)."""
    best: dict[bytes, Write] = {}
    for w in writes:
        assert w.key not in best or w.hlc != best[w.key].hlc
        if w.key not in best or w.hlc > best[w.key].hlc:
            best[w.key] = w
    return best


def live(winners: dict[bytes, Write]) -> dict[bytes, bytes]:
    return {k: w.value for k, w in winners.items() if w.value is not None}


def resolved_topic_view(bootstrap: str, topic: str) -> dict[bytes, bytes]:
    """The last record per key of a resolved topic, deletes left out."""
    last: dict[bytes, ck.Message] = {}
    for m in read_all(bootstrap, topic):
        last[m.key()] = m
    return {k: m.value() for k, m in last.items() if m.value() is not None}


def test_resolved_view_equals_the_oracle_whatever_the_reading_order(broker, regions) -> None:
    local, mirror, writes, rewritten = regions
    expected = oracle(writes)
    assert len(expected) == len(KEYS)
    # A's writes made after reading B's win the keys they rewrote (HLC keeps causality despite
    # B's clock 2 s ahead); B's skewed clock wins keys written concurrently.
    assert all(expected[k].hlc.node_id == 1 for k in rewritten)
    assert any(w.hlc.node_id == 2 for w in expected.values())
    assert any(w.value is None for w in expected.values())  # some keys end deleted
    conf = {"bootstrap.servers": broker.bootstrap}
    dead = f"dead-{local}"
    first = ResolverProcess(conf, local, [mirror], dead_letter_topic=dead)
    second = ResolverProcess(conf, mirror, [local], resolved_topic=f"{local}.resolved-2")
    for process in (first, second):
        process.start()
        try:
            process.catch_up()
        finally:
            process.close()
    assert first.sources == [local, mirror] and second.sources == [mirror, local]
    for process in (first, second):
        assert process.stats.records == len(writes)
        assert process.stats.resolved_written == len(KEYS)  # a catch-up writes each key once
        assert {k: s.winner for k, s in process.resolver.states().items()} == expected
        assert process.resolver.values() == live(expected)
        assert resolved_topic_view(broker.bootstrap, process.resolved_topic) == live(expected)
    # Conflicts: the keys A did not rewrite end with two concurrent writes, A's the loser.
    losers = set()
    for key in KEYS:
        mine = [w for w in writes if w.key == key]
        losers |= maximal(mine) - {expected[key]}
    assert len(losers) == len(KEYS) - len(rewritten)
    final = set().union(*(s.losers for s in first.resolver.states().values()))
    assert final == losers
    dead_letters = read_all(broker.bootstrap, dead)
    assert len(dead_letters) == first.resolver.conflicts == first.stats.dead_letters
    reported = {(m.key(), Timestamp.decode(dict(m.headers())[HEADER])) for m in dead_letters}
    assert {(w.key, w.hlc) for w in losers} <= reported
    assert all(dict(m.headers())["hlc.dead-letter.reason"] == b"conflict" for m in dead_letters)
    admin = AdminClient(conf)
    res = ConfigResource(ConfigResource.Type.TOPIC, first.resolved_topic)
    configs = admin.describe_configs([res])[res].result(10)
    assert configs["cleanup.policy"].value == "compact"


def test_the_resolve_verb_writes_the_same_view(broker, regions) -> None:
    local, mirror, writes, _ = regions
    resolved = f"{local}.resolved-cli"
    done = subprocess.run(
        [sys.executable, "-m", "gregor.cli.main", "hlc", "resolve", "-b", broker.bootstrap,
         "--topic", local, "--mirrors", mirror, "--resolved-topic", resolved,
         "--until-caught-up", "-o", "json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["sources"] == [local, mirror] and doc["resolved_topic"] == resolved
    assert doc["records"] == len(writes) and doc["keys"] == len(KEYS)
    assert doc["refused"] == 0
    assert resolved_topic_view(broker.bootstrap, resolved) == live(oracle(writes))


def test_a_write_an_hour_ahead_is_refused(broker) -> None:
    uid = uuid.uuid4().hex[:8]
    topic, dead = f"orders-{uid}", f"dead-{uid}"
    create_topics(broker.bootstrap, topic)
    conf = {"bootstrap.servers": broker.bootstrap}
    runaway = HlcProducer(HybridClock(9, lambda: SYSTEM_CLOCK.now_ms() + HOUR_MS), conf)
    sane = HlcProducer(HybridClock(1), conf)
    sane.produce(topic, value=b"sane", key=b"k", partition=0)
    assert sane.flush(30) == 0
    runaway.produce(topic, value=b"from the future", key=b"k", partition=0)
    assert runaway.flush(30) == 0
    reader = HybridClock(5, max_clock_skew_ms=60_000)
    [first, second] = read_all(broker.bootstrap, topic)
    observe(first, reader)
    before = reader.last
    with pytest.raises(ClockSkewError, match="max.clock.skew.ms=60000"):
        observe(second, reader)
    assert reader.last == before  # not adopted
    process = ResolverProcess(conf, topic, [], dead_letter_topic=dead)
    process.start()
    try:
        process.catch_up()
    finally:
        process.close()
    assert process.resolver.values() == {b"k": b"sane"}
    assert process.stats.refused == 1
    [letter] = read_all(broker.bootstrap, dead)
    assert letter.value() == b"from the future"
    assert dict(letter.headers())["hlc.dead-letter.reason"] == b"clock-skew"


def test_a_missing_source_topic_is_one_line(broker) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gregor.cli.main", "hlc", "resolve", "-b", broker.bootstrap,
         "--topic", "no-such-orders", "--until-caught-up"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr == "gregor: source topic no-such-orders does not exist\n"
    done = subprocess.run(
        [sys.executable, "-m", "gregor.cli.main", "hlc", "resolve", "-b", broker.bootstrap,
         "--topic", "orders", "--mirrors", "B.orders", "--dead-letter-topic", "B.orders"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr == (
        "gregor: the dead-letter topic B.orders is also a source or the resolved topic\n"
    )


def test_the_process_follows_new_writes_until_stopped(broker) -> None:
    uid = uuid.uuid4().hex[:8]
    local, mirror = f"orders-{uid}", f"B.orders-{uid}"
    create_topics(broker.bootstrap, local, mirror)
    conf = {"bootstrap.servers": broker.bootstrap}
    a, b = HlcProducer(HybridClock(1), conf), HlcProducer(HybridClock(2), conf)
    a.produce(local, value=b"a1", key=b"k")
    assert a.flush(30) == 0
    process = ResolverProcess(conf, local, [mirror], refresh_interval_s=0.2)
    process.start()
    process.catch_up()
    assert process.resolver.values() == {b"k": b"a1"}
    stop = threading.Event()
    runner = threading.Thread(target=process.run, args=(stop,))
    runner.start()
    try:
        b.produce(mirror, value=b"b1", key=b"k")
        b.produce(mirror, value=b"b2", key=b"j")
        assert b.flush(30) == 0
        wait_for(lambda: process.resolver.values() == {b"k": b"b1", b"j": b"b2"})
        # A partition added to a source (as a mirror follows its source) is read too.
        admin = AdminClient(conf)
        admin.create_partitions([NewPartitions(mirror, 5)])[mirror].result(30)
        wait_for(lambda: len(b.list_topics(mirror, timeout=5).topics[mirror].partitions) == 5)
        b.produce(mirror, value=b"new", key=b"n", partition=4)
        assert b.flush(30) == 0
        wait_for(lambda: process.resolver.value(b"n") == b"new")
    finally:
        stop.set()
        runner.join(30)
        process.close()
    assert not runner.is_alive()
    assert resolved_topic_view(broker.bootstrap, process.resolved_topic) == {
        b"k": b"b1",
        b"j": b"b2",
        b"n": b"new",
    }


def wait_for(pred, timeout_s: float = 30.0) -> None:
    deadline = SYSTEM_CLOCK.monotonic_s() + timeout_s
    while not pred():
        assert SYSTEM_CLOCK.monotonic_s() < deadline, "timed out waiting for the resolver"
        SYSTEM_CLOCK.sleep(0.05)


def test_the_resolve_verb_follows_until_sigterm(broker) -> None:
    uid = uuid.uuid4().hex[:8]
    local, mirror = f"orders-{uid}", f"B.orders-{uid}"
    create_topics(broker.bootstrap, local, mirror)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gregor.cli.main", "hlc", "resolve", "-b", broker.bootstrap,
         "--topic", local, "--mirrors", mirror, "-o", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        b = HlcProducer(HybridClock(2), {"bootstrap.servers": broker.bootstrap})
        b.produce(mirror, value=b"v", key=b"k")
        assert b.flush(30) == 0

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})

        def resolved() -> bool:
            if f"{local}.resolved" not in admin.list_topics(timeout=10).topics:
                return False  # not created by the resolver yet (and not to be auto-created)
            return resolved_topic_view(broker.bootstrap, f"{local}.resolved") == {b"k": b"v"}

        wait_for(resolved)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    doc = json.loads(out)
    assert (doc["records"], doc["keys"], doc["resolved_written"]) == (1, 1, 1)
