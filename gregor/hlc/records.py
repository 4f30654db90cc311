"""What the resolver process does with one record read, as a pure decision: the write it is,
and the records to produce because of it (the new resolved value, the dead letters).

A record becomes a Write from its key, value and `hlc` (and optional `hlc-vv`) header. Records
that cannot take part are dead letters, never dropped silently: no key, no or a bad `hlc`
header, or a timestamp further ahead of the resolver's clock than max.clock.skew.ms (adopting it
would let one runaway clock win every key for as long as it is ahead). So are the writes that
lose a conflict. A dead letter is the record's key and value, its headers (for a losing write,
its `hlc` and `hlc-vv`), and
`hlc.dead-letter.reason` (conflict, clock-skew, no-key, no-hlc-header, bad-header),
`hlc.dead-letter.topic`, `.partition`, `.offset` (where it was read), and for a conflict
`hlc.dead-letter.winner` (the winning write's `hlc` header).

A resolved record is the winning write: its key, its value (None, a tombstone, for a delete, so
the compacted topic forgets deleted keys) and its `hlc` (and `hlc-vv`) headers.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from gregor.hlc import version_vector
from gregor.hlc.clock import ClockSkewError, HybridClock
from gregor.hlc.resolver import Origin, Resolver, Write
from gregor.hlc.timestamp import HEADER, HeaderError, Timestamp, find_header

REASON = "hlc.dead-letter.reason"
DL_TOPIC = "hlc.dead-letter.topic"
DL_PARTITION = "hlc.dead-letter.partition"
DL_OFFSET = "hlc.dead-letter.offset"
DL_WINNER = "hlc.dead-letter.winner"


class Record(NamedTuple):
    """A record as read: where from, and what."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


class Out(NamedTuple):
    """A record to produce."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


class Rejected(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def to_write(record: Record) -> Write:
    """The write a record is; Rejected (with the dead-letter reason) when it cannot be one."""
    if record.key is None:
        raise Rejected("no-key", "a record without a key cannot be resolved")
    raw = find_header(record.headers, HEADER)
    if raw is None:
        raise Rejected("no-hlc-header", f"no {HEADER!r} header")
    try:
        ts = Timestamp.decode(raw)
        raw_vv = find_header(record.headers, version_vector.HEADER)
        vv = None if raw_vv is None else version_vector.decode(raw_vv)
    except HeaderError as exc:
        raise Rejected("bad-header", str(exc)) from None
    origin = Origin(record.topic, record.partition, record.offset)
    return Write(record.key, record.value, ts, vv, origin)


def handle(
    record: Record,
    resolver: Resolver,
    clock: HybridClock,
    resolved_topic: str,
    dead_letter_topic: str | None,
) -> tuple[list[Out], str | None]:
    """Apply one record; the records to produce, and the dead-letter reason if it was refused."""
    try:
        write = to_write(record)
        clock.update(write.hlc)
    except Rejected as exc:
        return _dead(record, exc.reason, None, dead_letter_topic), exc.reason
    except ClockSkewError:
        return _dead(record, "clock-skew", None, dead_letter_topic), "clock-skew"
    applied = resolver.apply(write)
    outs: list[Out] = []
    winner = applied.state.winner
    if applied.changed:
        outs.append(Out(resolved_topic, winner.key, winner.value, write_headers(winner)))
    for loser in applied.new_losers:
        outs += _dead(_record_of(loser), "conflict", winner, dead_letter_topic)
    return outs, None


def write_headers(write: Write) -> list[tuple[str, bytes | None]]:
    headers: list[tuple[str, bytes | None]] = [(HEADER, write.hlc.encode())]
    if write.vv is not None:
        headers.append((version_vector.HEADER, version_vector.encode(write.vv)))
    return headers


def _record_of(write: Write) -> Record:
    origin = write.origin or Origin("", -1, -1)
    return Record(*origin, write.key, write.value, write_headers(write))


def _dead(record: Record, reason: str, winner: Write | None, topic: str | None) -> list[Out]:
    if topic is None:
        return []
    headers = [h for h in record.headers if not h[0].startswith("hlc.dead-letter.")]
    headers += [
        (REASON, reason.encode()),
        (DL_TOPIC, record.topic.encode()),
        (DL_PARTITION, str(record.partition).encode()),
        (DL_OFFSET, str(record.offset).encode()),
    ]
    if winner is not None:
        headers.append((DL_WINNER, winner.hlc.encode()))
    return [Out(topic, record.key, record.value, headers)]


def from_message(msg: Any) -> Record:
    """A Record from a confluent-kafka Message."""
    return Record(
        msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), msg.headers() or []
    )
