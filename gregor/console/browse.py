"""The message browser: which records of a topic a page asks for (`parse_query`, pure), and
reading them with a Consumer assigned to each partition (`read`, blocking).

Modes: `newest` (the last N of one partition or of all, newest first), `offset` (N from an
offset of one partition) and `timestamp` (N from the first record at or after a time, found
with ListOffsets by timestamp). Each partition's bounds are asked first, of all at once,
through the admin client. A key or value filter scans at most SCAN_LIMIT records per
partition and says when it stopped there. An offset past a partition's end, an unknown
partition or a page larger than MAX_PAGE_SIZE is a BadInput, answered with a 400.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import OffsetSpec

from gregor.clock import SYSTEM_CLOCK, Clock
from gregor.console import values
from gregor.console.cluster import Cluster
from gregor.console.errors import BadInput, Unavailable
from gregor.console.settings import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, ConsoleSettings

SCAN_LIMIT = 10_000
LONG_MAX = (1 << 63) - 1  # offsets and timestamps are Kafka longs
MODES = ("newest", "offset", "timestamp")
_BATCH = 500


@dataclass(frozen=True)
class Query:
    mode: str
    partition: int | None  # None: every partition
    offset: int | None
    timestamp_ms: int | None
    limit: int
    key_filter: str
    value_filter: str

    @property
    def filtered(self) -> bool:
        return bool(self.key_filter or self.value_filter)


@dataclass
class Record:
    partition: int
    offset: int
    timestamp_ms: int
    key: values.Shown
    value: values.Shown
    headers: list[tuple[str, values.Shown]]

    @property
    def time(self) -> str:
        if self.timestamp_ms < 0:
            return "-"
        return datetime.fromtimestamp(self.timestamp_ms / 1000, UTC).isoformat(
            timespec="milliseconds"
        )


@dataclass
class Page:
    records: list[Record]
    notes: list[str] = field(default_factory=list)


def _int(params: Mapping[str, str], name: str, what: str) -> int | None:
    raw = params.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise BadInput(f"{what} must be a whole number, not {raw[:40]!r}") from None
    if abs(value) > LONG_MAX:
        raise BadInput(f"{what} {raw[:40]} is out of range")
    return value


def parse_timestamp(raw: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 time (UTC unless it names a zone); not
    before 1970 (ListOffsets reads negative times as "latest" and "earliest")."""
    raw = raw.strip()
    if raw.lstrip("-").isdigit():
        stamp = int(raw)
    else:
        try:
            when = datetime.fromisoformat(raw)
        except ValueError:
            raise BadInput(
                f"{raw[:40]!r} is not a time (ms since the epoch, or 2024-05-01T12:00:00)"
            ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        stamp = int(when.timestamp() * 1000)
    if not 0 <= stamp <= LONG_MAX:
        raise BadInput(f"the time {raw[:40]} is out of range (1970 onwards)")
    return stamp


def parse_query(params: Mapping[str, str], partitions: int) -> Query:
    """The browser's query string, checked against the topic's partition count."""
    mode = params.get("mode", "newest") or "newest"
    if mode not in MODES:
        raise BadInput(f"mode must be one of {', '.join(MODES)}, not {mode[:40]!r}")
    partition = (
        None
        if params.get("partition", "") in ("", "all")
        else _int(params, "partition", "the partition")
    )
    if partition is not None and not 0 <= partition < partitions:
        raise BadInput(
            f"partition {partition} does not exist: the topic has partitions 0 to {partitions - 1}"
        )
    limit = _int(params, "limit", "the page size")
    limit = DEFAULT_PAGE_SIZE if limit is None else limit
    if not 1 <= limit <= MAX_PAGE_SIZE:
        raise BadInput(f"the page size must be between 1 and {MAX_PAGE_SIZE}, not {limit}")
    offset = _int(params, "offset", "the offset")
    timestamp = None
    if mode == "offset":
        if partition is None:
            raise BadInput("browsing by offset needs one partition")
        if offset is None or offset < 0:
            raise BadInput("browsing by offset needs an offset of 0 or more")
    if mode == "timestamp":
        if not params.get("timestamp", "").strip():
            raise BadInput("browsing by timestamp needs a time")
        timestamp = parse_timestamp(params["timestamp"])
    return Query(
        mode, partition, offset, timestamp, limit, params.get("key", ""), params.get("value", "")
    )


def _record(m: Any) -> Record:
    headers = [(k, values.show(v)) for k, v in (m.headers() or [])]
    _, ts = m.timestamp()
    return Record(
        m.partition(), m.offset(), ts, values.show(m.key()), values.show(m.value()), headers,
    )  # fmt: skip


class Reader:
    """A Consumer assigned to one partition at a time (never joining a group, never
    committing), closed with the reader."""

    def __init__(self, settings: ConsoleSettings, clock: Clock = SYSTEM_CLOCK) -> None:
        self.timeout_s = settings.request_timeout_s
        self.clock = clock
        conf = settings.kafka_config(
            **{
                "group.id": "gregor-console",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": "read_uncommitted",
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 50,
            }
        )
        self.consumer = Consumer(conf)

    def close(self) -> None:
        self.consumer.close()

    def scan(
        self, topic: str, partition: int, start: int, end: int, query: Query, keep: int | None
    ) -> tuple[list[Record], bool]:
        """Matching records of offsets [start, end): the first `keep` (None: all matching),
        and whether the scan stopped at SCAN_LIMIT before `end`."""
        out: list[Record] = []
        if start >= end:
            return out, False
        self.consumer.assign([TopicPartition(topic, partition, start)])
        scanned, deadline = 0, self.clock.monotonic_s() + self.timeout_s
        try:
            while self.clock.monotonic_s() < deadline:
                # no more than are left: back as soon as they came, not after a wait for more
                left = max(1, min(_BATCH, end - start - scanned))
                for m in self.consumer.consume(left, timeout=0.05):
                    error = m.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            return out, False
                        raise Unavailable(f"{topic}-{partition}: {error.str()}")
                    at = m.offset()
                    assert at is not None  # a message, not an event
                    if at >= end:
                        return out, False
                    scanned += 1
                    if values.matches(m.key(), query.key_filter) and values.matches(
                        m.value(), query.value_filter
                    ):
                        out.append(_record(m))
                        if keep is not None and len(out) >= keep:
                            return out, False
                    if at >= end - 1:
                        return out, False
                    if scanned >= SCAN_LIMIT:
                        return out, True
            raise Unavailable(f"{topic}-{partition}: no records in {self.timeout_s:g} s")
        finally:
            self.consumer.unassign()


@dataclass(frozen=True)
class Bounds:
    """Where each asked partition starts and ends, and where its reading starts (ListOffsets
    through the admin client, all partitions in one go, before any fetch)."""

    low: dict[int, int]
    high: dict[int, int]
    at_time: dict[int, int]  # by timestamp: the first offset at or after it (-1: none)


def bounds(cluster: Cluster, topic: str, wanted: list[int], query: Query) -> Bounds:
    keys = [(topic, p) for p in wanted]
    low = cluster.offsets(keys, OffsetSpec.earliest())
    high = cluster.offsets(keys, OffsetSpec.latest())
    at_time = {}
    if query.timestamp_ms is not None:
        at_time = cluster.offsets(keys, OffsetSpec.for_timestamp(query.timestamp_ms))
    return Bounds(
        {p: o for (_, p), o in low.items()},
        {p: o for (_, p), o in high.items()},
        {p: o for (_, p), o in at_time.items()},
    )


def read(cluster: Cluster, topic: str, partitions: int, query: Query) -> Page:
    wanted = list(range(partitions)) if query.partition is None else [query.partition]
    where = bounds(cluster, topic, wanted, query)
    page = Page([])
    starts = {p: _start(p, where, query, page) for p in wanted}
    reader = Reader(cluster.settings)
    try:
        for p in wanted:
            _read_partition(reader, topic, p, starts[p], where.high[p], query, page)
    finally:
        reader.close()
    if query.mode == "newest":
        page.records.sort(key=lambda r: (r.timestamp_ms, r.offset), reverse=True)
    elif query.partition is None:
        page.records.sort(key=lambda r: (r.timestamp_ms, r.partition, r.offset))
    page.records = page.records[: query.limit]
    return page


def _read_partition(
    reader: Reader, topic: str, p: int, start: int, high: int, query: Query, page: Page
) -> None:
    if query.mode == "newest":
        got, capped = reader.scan(topic, p, start, high, query, None)
        got = got[-query.limit :]
    else:
        got, capped = reader.scan(topic, p, start, high, query, query.limit)
    if capped:
        page.notes.append(f"partition {p}: the filter looked at {SCAN_LIMIT} records and stopped")
    page.records += got


def _start(p: int, where: Bounds, query: Query, page: Page) -> int:
    low, high = where.low[p], where.high[p]
    if query.mode == "newest":
        return max(low, high - (SCAN_LIMIT if query.filtered else query.limit))
    if query.mode == "timestamp":
        found = where.at_time[p]
        return high if found < 0 else found
    assert query.offset is not None
    if query.offset > high:
        raise BadInput(
            f"offset {query.offset} is past the end of partition {p} (its next offset is {high})"
        )
    if query.offset < low:
        page.notes.append(
            f"partition {p} starts at offset {low} (older records were deleted): shown from there"
        )
        return low
    return query.offset
