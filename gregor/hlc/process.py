"""The resolver process: reads a local topic and its mirrored copies (`orders`, `B.orders`)
with confluent-kafka, keeps the resolved value of every key (`Resolver`) and writes each new
winner to a compacted topic (`orders.resolved` by default, created with cleanup.policy=compact
if missing), and the losing writes of conflicts and refused records to a dead-letter topic.

It reads without a consumer group and commits nothing: at start it reads every source from its
beginning and rebuilds the view (so it never trusts a previous run; the resolved topic gets the
same values again, which compaction folds away, and dead letters may repeat). `catch_up()`
reads the sources one after the other, in the order given, each up to its end as of then,
and writes each changed key's winner once at its end; `run()` then follows all of them,
writing the winners changed by each batch read. The decisions are `records.handle`'s; this
is the I/O.

The view depends on the set of records read, not their order, with one exception by design: a
record stamped more than max.clock.skew.ms ahead of this process's clock is refused (a dead
letter), and whether it is depends on when it is read. Only a clock that far wrong meets it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gregor.clock import SYSTEM_CLOCK, Clock
from gregor.hlc.clock import DEFAULT_MAX_CLOCK_SKEW_MS, HybridClock
from gregor.hlc.records import Out, from_message, handle
from gregor.hlc.resolver import Resolver

RESOLVED_SUFFIX = ".resolved"
BATCH = 500
POLL_S = 0.2


class ResolverError(Exception):
    """Something the user must change (a missing source topic, say): one line."""


@dataclass
class Stats:
    records: int = 0  # read from the sources
    resolved_written: int = 0  # winners produced to the resolved topic
    refused: int = 0  # records sent to the dead letters without taking part
    dead_letters: int = 0


def _default_build(kind: str, conf: dict[str, Any]) -> Any:
    import confluent_kafka
    from confluent_kafka.admin import AdminClient

    factory = {
        "admin": AdminClient,
        "producer": confluent_kafka.Producer,
        "consumer": confluent_kafka.Consumer,
    }
    return factory[kind](conf)


class ResolverProcess:
    """`ResolverProcess(config, "orders", ["B.orders"])`, then `start()`, `catch_up()`,
    `run(stop)`, `close()`; `resolver` is the resolved view (`value(key)`, `values()`).
    `config` holds client settings (bootstrap.servers, ...); `build(kind, conf)` makes the
    clients ("admin", "producer", "consumer"), confluent-kafka's by default."""

    def __init__(
        self,
        config: dict[str, Any],
        topic: str,
        mirrors: list[str],
        *,
        resolved_topic: str | None = None,
        dead_letter_topic: str | None = None,
        max_clock_skew_ms: int = DEFAULT_MAX_CLOCK_SKEW_MS,
        clock: Clock = SYSTEM_CLOCK,
        build: Callable[[str, dict[str, Any]], Any] = _default_build,
        timeout_s: float = 30.0,
        refresh_interval_s: float = 30.0,
    ) -> None:
        self.sources = [topic, *[m for m in mirrors if m != topic]]
        self.resolved_topic = resolved_topic or topic + RESOLVED_SUFFIX
        if self.resolved_topic in self.sources:
            raise ResolverError(f"the resolved topic {self.resolved_topic} is also a source")
        if dead_letter_topic in (*self.sources, self.resolved_topic):
            raise ResolverError(
                f"the dead-letter topic {dead_letter_topic} is also a source or the resolved topic"
            )
        self.dead_letter_topic = dead_letter_topic
        self.resolver = Resolver()
        self.stats = Stats()
        self.hlc = HybridClock(0, clock.now_ms, max_clock_skew_ms)
        self._config = dict(config)
        self._clock = clock
        self._build = build
        self._timeout_s = timeout_s
        self._refresh_interval_s = refresh_interval_s
        self._next: dict[tuple[str, int], int] = {}  # next offset to read
        self._consumer: Any = None
        self._producer: Any = None
        self._errors: list[str] = []
        self._pending: dict[bytes | None, Out] = {}  # new winners not produced yet, by key

    def start(self) -> None:
        """Connect, check the sources, create the resolved (and dead-letter) topic if missing."""
        admin = self._build("admin", self._config)
        md = admin.list_topics(timeout=self._timeout_s)
        for name in self.sources:
            t = md.topics.get(name)
            if t is None or t.error is not None:
                raise ResolverError(f"source topic {name} does not exist")
            for p in t.partitions:
                self._next[(name, p)] = 0  # raised to the log start offset when read
        partitions = len(md.topics[self.sources[0]].partitions)
        self._ensure(admin, md, self.resolved_topic, partitions, {"cleanup.policy": "compact"})
        if self.dead_letter_topic:
            self._ensure(admin, md, self.dead_letter_topic, partitions, {})
        consumer_conf = {
            **self._config,
            "group.id": "gregor-hlc-resolver",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "auto.offset.reset": "earliest",
        }
        self._consumer = self._build("consumer", consumer_conf)
        self._producer = self._build(
            "producer", {**self._config, "enable.idempotence": True, "linger.ms": 5}
        )

    def _ensure(self, admin: Any, md: Any, name: str, partitions: int, config: dict) -> None:
        from confluent_kafka.admin import NewTopic

        if name in md.topics and md.topics[name].error is None:
            return
        topic = NewTopic(name, num_partitions=partitions, replication_factor=-1, config=config)
        future = admin.create_topics([topic], request_timeout=self._timeout_s)[name]
        try:
            future.result()
        except Exception as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise ResolverError(f"cannot create topic {name}: {exc}") from None

    def catch_up(self) -> None:
        """Read each source in order up to its end as of now, then flush what was produced."""
        for name in self.sources:
            tps = [tp for tp in self._next if tp[0] == name]
            ends = self._ends(tps)
            self._assign(tps)
            deadline = self._clock.monotonic_s() + self._timeout_s
            while any(self._next[tp] < ends[tp] for tp in tps):
                if self._poll():
                    deadline = self._clock.monotonic_s() + self._timeout_s
                elif self._clock.monotonic_s() > deadline:
                    behind = [f"{t}:{p}" for t, p in tps if self._next[(t, p)] < ends[(t, p)]]
                    raise ResolverError(
                        f"no progress reading {', '.join(behind)} in {self._timeout_s:g} s"
                    )
        self._drain()
        self.flush()

    def run(self, stop: threading.Event | Callable[[], bool]) -> None:
        """Follow every source until `stop` is set (or returns True); partitions added to a
        source are read from their start within `refresh_interval_s`."""
        done = stop.is_set if isinstance(stop, threading.Event) else stop
        self._assign(list(self._next))
        refresh_at = self._clock.monotonic_s() + self._refresh_interval_s
        while not done():
            self._poll()
            self._drain()
            if self._clock.monotonic_s() >= refresh_at:
                self._maybe_add_partitions()
                refresh_at = self._clock.monotonic_s() + self._refresh_interval_s
        self.flush()

    def _maybe_add_partitions(self) -> None:
        md = self._consumer.list_topics(timeout=self._timeout_s)
        added = False
        for name in self.sources:
            t = md.topics.get(name)
            for p in t.partitions if t is not None and t.error is None else ():
                if (name, p) not in self._next:
                    self._next[(name, p)] = 0  # below the log start: auto.offset.reset earliest
                    added = True
        if added:
            self._note_positions()
            self._assign(list(self._next))

    def flush(self) -> None:
        """Wait until everything produced is acknowledged; ResolverError if any failed."""
        left = self._producer.flush(self._timeout_s)
        if left:
            raise ResolverError(f"{left} records not acknowledged in {self._timeout_s:g} s")
        if self._errors:
            raise ResolverError(f"cannot write: {self._errors[0]}")

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self._producer is not None:
            self._producer.flush(self._timeout_s)
            self._producer = None

    def _ends(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Each partition's high watermark; a partition not read yet starts at its log start."""
        from confluent_kafka import TopicPartition

        ends = {}
        for tp in tps:
            low, high = self._consumer.get_watermark_offsets(TopicPartition(*tp), self._timeout_s)
            self._next[tp] = max(self._next[tp], low)
            ends[tp] = high
        return ends

    def _assign(self, tps: list[tuple[str, int]]) -> None:
        from confluent_kafka import TopicPartition

        self._consumer.assign([TopicPartition(t, p, self._next[(t, p)]) for t, p in tps])

    def _poll(self) -> int:
        """Read and handle one batch; how many records it had."""
        from confluent_kafka import KafkaException

        msgs = self._consumer.consume(BATCH, POLL_S)
        for msg in msgs:
            if msg.error():
                raise KafkaException(msg.error())
            self._next[(msg.topic(), msg.partition())] = msg.offset() + 1
            self._handle(msg)
        if not msgs:
            self._note_positions()
        self._producer.poll(0)
        return len(msgs)

    def _note_positions(self) -> None:
        """An idle read: take the consumer's positions (they pass control records too)."""
        for tp in self._consumer.position(self._consumer.assignment()):
            if tp.offset >= 0:
                key = (tp.topic, tp.partition)
                self._next[key] = max(self._next[key], tp.offset)

    def _handle(self, msg: Any) -> None:
        self.stats.records += 1
        outs, refused = handle(
            from_message(msg), self.resolver, self.hlc, self.resolved_topic, self.dead_letter_topic
        )
        if refused:
            self.stats.refused += 1
        for out in outs:
            if out.topic == self.resolved_topic:
                self._pending[out.key] = out
            else:
                self.stats.dead_letters += 1
                self._send(out)

    def _drain(self) -> None:
        """Produce the latest winner of each key changed since the last drain: a catch-up
        writes each key once, not once per write it read."""
        pending, self._pending = self._pending, {}
        for out in pending.values():
            self.stats.resolved_written += 1
            self._send(out)

    def _send(self, out: Out) -> None:
        while True:
            try:
                self._producer.produce(
                    out.topic,
                    key=out.key,
                    value=out.value,
                    headers=out.headers,
                    on_delivery=self._delivered,
                )
                return
            except BufferError:
                self._producer.poll(0.1)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._errors.append(f"{msg.topic()}: {err.str()}")
