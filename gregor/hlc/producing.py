"""Stamping records with a node's hybrid logical clock, and moving the clock on reads.

`stamp(headers, clock)` works for any client: it returns the record's headers with a fresh
`hlc` header (and `hlc-vv` when a version vector is given), the user's own headers kept in
order. `HlcProducer` wraps a confluent-kafka Producer and stamps every record it sends.
`observe(message, clock)` is for the read side: an application that reads a record and then
writes must first move its clock past what it read, so its write orders after it (HLC keeps
causality); a record too far ahead is refused with ClockSkewError.
"""

from __future__ import annotations

from typing import Any

from gregor.hlc import version_vector
from gregor.hlc.clock import HybridClock
from gregor.hlc.timestamp import HEADER, Timestamp, find_header
from gregor.hlc.version_vector import VersionVector

Headers = list[tuple[str, bytes | None]]


def stamp(
    headers: Any, clock: HybridClock, vv: VersionVector | None = None
) -> tuple[Headers, Timestamp]:
    """`headers` (a list of pairs, a dict, or None) with a fresh `hlc` header from `clock`
    (any `hlc` or `hlc-vv` header the user passed is replaced), and the timestamp given."""
    ts = clock.now()
    pairs = headers.items() if isinstance(headers, dict) else (headers or [])
    out: Headers = []
    for key, value in pairs:
        if key in (HEADER, version_vector.HEADER):
            continue
        out.append((key, value.encode() if isinstance(value, str) else value))
    out.append((HEADER, ts.encode()))
    if vv is not None:
        out.append((version_vector.HEADER, version_vector.encode(vv)))
    return out, ts


def read_timestamp(message: Any) -> Timestamp | None:
    """The `hlc` timestamp of a record: a confluent-kafka Message (its `headers()`), an object
    with a `headers` attribute (kafka-python, aiokafka), or a header list; None when absent."""
    headers = message
    if hasattr(message, "headers"):
        headers = message.headers() if callable(message.headers) else message.headers
    raw = find_header(headers, HEADER)
    return None if raw is None else Timestamp.decode(raw)


def observe(message: Any, clock: HybridClock) -> Timestamp | None:
    """Move `clock` past the record's `hlc` timestamp (None when it has none). Raises
    ClockSkewError for a timestamp further ahead than the clock's max.clock.skew.ms."""
    ts = read_timestamp(message)
    if ts is not None:
        clock.update(ts)
    return ts


class HlcProducer:
    """A confluent-kafka Producer whose every record carries the clock's `hlc` header.

    `HlcProducer(clock, {"bootstrap.servers": ...})` builds the Producer; `producer=` wraps one
    you have. `produce` takes confluent-kafka's arguments (plus `vv`, a version vector for
    `hlc-vv`) and returns the timestamp stamped; everything else (poll, flush, ...) is the
    wrapped Producer's."""

    def __init__(
        self,
        clock: HybridClock,
        config: dict[str, Any] | None = None,
        *,
        producer: Any = None,
    ) -> None:
        if (config is None) == (producer is None):
            raise ValueError("HlcProducer takes a config or a producer (one of them)")
        if producer is None:
            from confluent_kafka import Producer

            assert config is not None
            producer = Producer(config)
        self.clock = clock
        self.producer = producer

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        *,
        headers: Any = None,
        vv: VersionVector | None = None,
        **kwargs: Any,
    ) -> Timestamp:
        stamped, ts = stamp(headers, self.clock, vv)
        self.producer.produce(topic, value=value, key=key, headers=stamped, **kwargs)
        return ts

    def observe(self, message: Any) -> Timestamp | None:
        """`observe(message, self.clock)`."""
        return observe(message, self.clock)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.producer, name)

    def __len__(self) -> int:
        return len(self.producer)
