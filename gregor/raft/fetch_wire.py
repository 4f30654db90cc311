"""KRaft's Fetch v17 of `__cluster_metadata-0` straight between the core's messages and bytes.

A KRaft Fetch is the same small message again and again: one topic (by Kafka's metadata topic
id), one partition, a few numbers. The generated codec turns it into five or six message
objects on each side, which wire.py then maps to the core's message; here the core's message is
written as bytes and read back from bytes directly, for v17 only (what Kafka 4.0 and we send).

    FetchRequestBody(message)      the core's FetchRequest as a body that writes its own bytes
    FetchResponseBody(message)     the core's FetchResponse, likewise (node_endpoints settable)
    read_request(mv, pos, end)     -> (FetchRequestView, pos) | None    codec shortcuts (codec.py)
    read_response(mv, pos, end)    -> (FetchResponseView, pos) | None

The bytes written are those the generated encoder writes for the body wire.py would build
(tests compare them); each body still reads as that generated body, field by field, built on
first use (`generic`), and once built it is what gets encoded. A reader returns None, leaving
the frame to the generated decoder, for anything but the exact shape below: another topic or
more than one, another partition or more, aborted transactions, a tagged field we do not name,
a replica directory id, a rack id, forgotten topics, and any malformed bytes (which the
generated decoder then refuses as it always did). A view also reads as the generated body,
decoded from the same bytes on first use.

    FetchRequest v17 (after the header) =>
      max_wait_ms:int32 min_bytes:int32 max_bytes:int32 isolation_level:int8 session_id:int32
      session_epoch:int32  topics:[02] topic_id:uuid  partitions:[02]
        partition:int32 current_leader_epoch:int32 fetch_offset:int64 last_fetched_epoch:int32
        log_start_offset:int64 partition_max_bytes:int32 <tags 00>
      <topic tags 00> forgotten_topics_data:[01] rack_id:"" (01)
      <tags: 0 cluster_id (compact nullable string), 1 replica_state (replica_id:int32
       replica_epoch:int64 <tags 00>)>

    FetchResponse v17 (after the header) =>
      throttle_time_ms:int32 error_code:int16 session_id:int32  responses:[02] topic_id:uuid
      partitions:[02]
        partition_index:int32 error_code:int16 high_watermark:int64 last_stable_offset:int64
        log_start_offset:int64 aborted_transactions:[01] preferred_read_replica:int32
        records:compact nullable bytes
        <tags: 0 diverging_epoch (epoch:int32 end_offset:int64), 1 current_leader (leader_id:int32
         leader_epoch:int32), 2 snapshot_id (end_offset:int64 epoch:int32); each with tags 00>
      <topic tags 00> <tags: 0 node_endpoints [node_id:int32 host:compact string port:int32
       rack:compact nullable string <tags 00>]>
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

from gregor.protocol import api_keys
from gregor.protocol.codec import SelfEncoding, codec_for
from gregor.protocol.codegen import uvarint_bytes

VERSION = 17
METADATA_TOPIC_ID = uuid.UUID(int=1)  # Kafka's Uuid.METADATA_TOPIC_ID
_TOPIC_ID = METADATA_TOPIC_ID.bytes
_ONE_TOPIC = b"\x02" + _TOPIC_ID + b"\x02"  # one topic, the metadata topic id, one partition

_REQ_MIDDLE = b"\x00\x00\x01\x01"  # partition tags, topic tags, no forgotten topics, rack ""
# max_wait_ms .. session_epoch, the topic, partition .. partition_max_bytes, _REQ_MIDDLE
_REQ_ALL = struct.Struct(">iiibii18siiqiqi4s")
_REQ_FIXED = _REQ_ALL.size
_REPLICA_STATE = struct.Struct(">iq")
# throttle_time_ms error_code session_id, the topic, partition_index .. log_start_offset,
# aborted_transactions (an empty or null array: its length byte) and preferred_read_replica
_RESP_ALL = struct.Struct(">ihi18sihqqqBi")
_RESP_FIXED = _RESP_ALL.size
_I32 = struct.Struct(">i")
_II = struct.Struct(">ii")
_IQ = struct.Struct(">iq")
_QI = struct.Struct(">qi")
_new = object.__new__


def _generic_encode(kind: str) -> Any:
    return codec_for(api_keys.FETCH, kind).encoder(VERSION)


def _generic_decode(kind: str, mv: memoryview, pos: int, end: int) -> Any:
    body, _ = codec_for(api_keys.FETCH, kind).decoder(VERSION)(mv, pos, end)
    return body


def _compact_string(value: str) -> bytes:
    raw = value.encode()
    return uvarint_bytes(len(raw) + 1) + raw


# -- writing ------------------------------------------------------------------------------------


class _Body(SelfEncoding):
    """A body made from a core message; reads as the generated body (`generic`, built once by
    `build(self)`, wire.py's mapping), which is then what gets encoded."""

    __slots__ = ("message", "_build", "_generic")

    def __init__(self, message: Any, build: Any) -> None:
        self.message = message
        self._build = build
        self._generic: Any = None

    @property
    def generic(self) -> Any:
        if self._generic is None:
            self._generic = self._build(self)
        return self._generic

    def __getattr__(self, name: str) -> Any:  # a field of the generated body
        return getattr(self.generic, name)


class FetchRequestBody(_Body):
    """The core's FetchRequest (`message`) as a Fetch request body."""

    __slots__ = ()

    def encode_into(self, version: int, out: list[Any], buf: bytearray) -> bytearray:
        if self._generic is not None or version != VERSION:
            return _generic_encode("request")(self.generic, out, buf)
        r = self.message
        buf += _REQ_ALL.pack(
            r.max_wait_ms, 0, r.max_bytes, 0, 0, -1, _ONE_TOPIC, 0, r.current_leader_epoch,
            r.fetch_offset, r.last_fetched_epoch, r.log_start_offset, r.max_bytes, _REQ_MIDDLE,
        )  # fmt: skip
        cluster_id, replica_id = r.cluster_id, r.replica_id
        buf.append((cluster_id is not None) + (replica_id != -1))
        if cluster_id is not None:
            buf += _cluster_id_field(cluster_id)
        if replica_id != -1:
            buf += b"\x01\x0d"  # tag 1, 13 bytes
            buf += _REPLICA_STATE.pack(replica_id, -1)
            buf.append(0)
        return buf


class FetchResponseBody(_Body):
    """The core's FetchResponse (`message`) as a Fetch response body: its request-level and
    partition error codes and its batches' bytes (`records`) as wire.py splits and joins them;
    `set_endpoints` names where nodes listen (node_endpoints)."""

    __slots__ = ("error_code", "partition_error", "records", "endpoints")

    def __init__(
        self, message: Any, build: Any, error_code: int, partition_error: int, records: Any
    ) -> None:
        super().__init__(message, build)
        self.error_code = error_code
        self.partition_error = partition_error
        self.records = records
        self.endpoints: tuple[tuple[int, str, int], ...] = ()

    @property
    def generic(self) -> Any:
        if self._generic is None:
            self._generic = self._build(self)
            self._name_endpoints()
        return self._generic

    def set_endpoints(self, endpoints: tuple[tuple[int, str, int], ...]) -> None:
        """Name where nodes listen: (node id, host, port) each."""
        self.endpoints = endpoints
        if self._generic is not None:
            self._name_endpoints()

    def _name_endpoints(self) -> None:
        if self.endpoints:
            row = codec_for(api_keys.FETCH, "response").cls._structs["NodeEndpoint"]
            self._generic.node_endpoints = [
                row(node_id=n, host=h, port=p, rack=None) for n, h, p in self.endpoints
            ]

    def encode_into(self, version: int, out: list[Any], buf: bytearray) -> bytearray:
        if self._generic is not None or version != VERSION:
            return _generic_encode("response")(self.generic, out, buf)
        r = self.message
        buf += _RESP_ALL.pack(
            0, self.error_code, 0, _ONE_TOPIC, 0, self.partition_error, r.high_watermark, -1,
            r.log_start_offset, 1, -1,  # no aborted transactions, preferred_read_replica -1
        )  # fmt: skip
        records = self.records
        if records is None:
            buf.append(0)
        else:
            n = len(records)
            buf += uvarint_bytes(n + 1)
            if n:
                out.append(buf)
                out.append(records)
                buf = bytearray()
        buf = _partition_tags(r, buf)
        buf.append(0)  # the topic's tags
        if not self.endpoints:
            buf.append(0)
            return buf
        buf += _endpoints_field(self.endpoints)
        return buf


_FIELDS: dict[object, bytes] = {}  # the tagged fields below, by value: the same few again and again


def _cluster_id_field(cluster_id: str) -> bytes:
    """The request's tag 0, cluster_id, with its tag and size."""
    found = _FIELDS.get(cluster_id)
    if found is None:
        tagged = _compact_string(cluster_id)
        found = _remember(cluster_id, b"\x00" + uvarint_bytes(len(tagged)) + tagged)
    return found


def _endpoints_field(endpoints: tuple[tuple[int, str, int], ...]) -> bytes:
    """The response's tagged fields when it names endpoints: one, tag 0, node_endpoints."""
    found = _FIELDS.get(endpoints)
    if found is None:
        tagged = bytearray(uvarint_bytes(len(endpoints) + 1))
        for node_id, host, port in endpoints:
            tagged += _I32.pack(node_id)
            tagged += _compact_string(host)
            tagged += _I32.pack(port)
            tagged += b"\x00\x00"  # rack null, no tags
        found = _remember(endpoints, b"\x01\x00" + uvarint_bytes(len(tagged)) + tagged)
    return found


def _remember(key: object, value: bytes) -> bytes:
    if len(_FIELDS) >= 64:
        _FIELDS.clear()
    _FIELDS[key] = value
    return value


def _partition_tags(r: Any, buf: bytearray) -> bytearray:
    """The partition's tagged fields: those that differ from Kafka's defaults (-1, -1)."""
    d, s = r.diverging_epoch, r.snapshot_id
    diverging = d is not None and (d.epoch != -1 or d.end_offset != -1)
    leader = r.leader_id != -1 or r.leader_epoch != -1
    snapshot = s is not None and (s.end_offset != -1 or s.epoch != -1)
    buf.append(diverging + leader + snapshot)
    if diverging:
        buf += b"\x00\x0d"
        buf += _IQ.pack(d.epoch, d.end_offset)
        buf.append(0)
    if leader:
        buf += b"\x01\x09"
        buf += _II.pack(r.leader_id, r.leader_epoch)
        buf.append(0)
    if snapshot:
        buf += b"\x02\x0d"
        buf += _QI.pack(s.end_offset, s.epoch)
        buf.append(0)
    return buf


# -- reading ------------------------------------------------------------------------------------


class _View:
    """Fields read straight from a body's bytes; reads as the generated body too (decoded from
    the same bytes, which stay views into the frame as the generated decoder's records do)."""

    __slots__ = ("_src", "_generic")
    _kind = ""

    def __init__(self, mv: memoryview, pos: int, end: int) -> None:
        self._src = (mv, pos, end)
        self._generic: Any = None

    @property
    def generic(self) -> Any:
        if self._generic is None:
            self._generic = _generic_decode(self._kind, *self._src)
        return self._generic

    def __getattr__(self, name: str) -> Any:  # a field of the generated body
        return getattr(self.generic, name)


class FetchRequestView(_View):
    """A Fetch v17 request for `__cluster_metadata-0`: `fields` are the core's FetchRequest's
    but its correlation id (cluster_id, replica_id, current_leader_epoch, fetch_offset,
    last_fetched_epoch, log_start_offset, max_wait_ms, max_bytes)."""

    __slots__ = ("fields",)
    _kind = "request"
    fields: tuple[Any, ...]


class FetchResponseView(_View):
    """A Fetch v17 response naming `__cluster_metadata-0`'s topic id and one partition."""

    __slots__ = (
        "error_code", "partition_error", "high_watermark", "log_start_offset", "records",
        "leader_id", "leader_epoch", "diverging_epoch", "snapshot_id", "endpoints",
    )  # fmt: skip
    _kind = "response"
    error_code: int
    partition_error: int
    high_watermark: int
    log_start_offset: int
    records: memoryview | None
    leader_id: int
    leader_epoch: int
    diverging_epoch: tuple[int, int]  # (epoch, end_offset)
    snapshot_id: tuple[int, int]  # (end_offset, epoch)
    endpoints: dict[int, tuple[str, int]]


def _uvarint(mv: memoryview, pos: int) -> tuple[int, int]:
    """An unsigned varint at pos, and the position after it (IndexError past the end)."""
    byte = mv[pos]
    if byte < 0x80:
        return byte, pos + 1
    value, shift = byte & 0x7F, 7
    while True:
        pos += 1
        byte = mv[pos]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos + 1
        shift += 7
        if shift > 28:
            raise IndexError("varint too long")


def read_request(mv: memoryview, pos: int, end: int) -> tuple[FetchRequestView, int] | None:
    """The shortcut for Fetch v17 requests (module docstring); None: not this shape."""
    try:
        return _read_request(mv, pos, end)
    except (IndexError, struct.error, UnicodeDecodeError, ValueError):
        return None


def _read_request(mv: memoryview, pos: int, end: int) -> tuple[FetchRequestView, int] | None:
    start = pos
    if end - pos < _REQ_FIXED + 1:
        return None
    (wait, _min, max_bytes, _iso, _sid, _sepoch, topic, partition, current, fetch_offset,
     last_epoch, log_start, part_max, middle) = _REQ_ALL.unpack_from(mv, pos)  # fmt: skip
    if topic != _ONE_TOPIC or partition != 0 or middle != _REQ_MIDDLE:
        return None
    pos += _REQ_FIXED
    cluster_id, replica_id = None, -1
    count = mv[pos]
    pos += 1
    if count > 2:
        return None
    for _ in range(count):
        tag = mv[pos]  # 0 or 1: one byte
        size = mv[pos + 1]
        pos += 2
        if size >= 0x80:
            size, pos = _uvarint(mv, pos - 1)
        tag_end = pos + size
        if tag_end > end:
            return None
        if tag == 0:
            n = mv[pos]
            pos += 1
            if n >= 0x80:
                n, pos = _uvarint(mv, pos - 1)
            if n:
                cluster_id = str(mv[pos : pos + n - 1], "utf-8")
                pos += n - 1
            else:
                cluster_id = None
        elif tag == 1 and size == 13 and mv[pos + 12] == 0:
            replica_id, _epoch = _REPLICA_STATE.unpack_from(mv, pos)
        else:
            return None
        if pos > tag_end:
            return None
        pos = tag_end
    view = _new(FetchRequestView)
    view._src = (mv, start, end)
    view._generic = None
    view.fields = (
        cluster_id, replica_id, current, fetch_offset, last_epoch, log_start, wait,
        max_bytes if max_bytes < part_max else part_max,
    )  # fmt: skip
    return view, pos


_ENDPOINTS: dict[bytes, dict[int, tuple[str, int]]] = {}  # node_endpoints read, by their bytes


def read_response(mv: memoryview, pos: int, end: int) -> tuple[FetchResponseView, int] | None:
    """The shortcut for Fetch v17 responses (module docstring); None: not this shape."""
    try:
        return _read_response(mv, pos, end)
    except (IndexError, struct.error, UnicodeDecodeError, ValueError):
        return None


def _read_response(mv: memoryview, pos: int, end: int) -> tuple[FetchResponseView, int] | None:
    start = pos
    if end - pos < _RESP_FIXED + 4:
        return None
    view = _new(FetchResponseView)
    view._src = (mv, start, end)
    view._generic = None
    (_throttle, view.error_code, _session, topic, _index, view.partition_error,
     view.high_watermark, _lso, view.log_start_offset, aborted, _preferred,
     ) = _RESP_ALL.unpack_from(mv, pos)  # fmt: skip
    if topic != _ONE_TOPIC or aborted > 1:  # aborted transactions: null or none
        return None
    pos += _RESP_FIXED
    n = mv[pos]
    pos += 1
    if n >= 0x80:
        n, pos = _uvarint(mv, pos - 1)
    records = None
    if n:
        if pos + n - 1 > end:
            return None
        records = mv[pos : pos + n - 1]
        pos += n - 1
    view.records = records
    pos = _read_partition_tags(view, mv, pos, end)
    if pos < 0 or mv[pos] != 0:  # the topic's tags: none
        return None
    pos += 1
    count = mv[pos]
    pos += 1
    if count == 1 and mv[pos] == 0:
        size, pos = _uvarint(mv, pos + 1)
        if pos + size > end:
            return None
        raw = bytes(mv[pos : pos + size])  # the same few bytes again and again: read once
        found = _ENDPOINTS.get(raw)
        if found is None:
            found = {}
            if _read_endpoints(found, mv, pos) != pos + size:
                return None
            if len(_ENDPOINTS) >= 64:
                _ENDPOINTS.clear()
            _ENDPOINTS[raw] = found
        view.endpoints = dict(found)
        pos += size
    elif count:
        return None
    else:
        view.endpoints = {}
    return view, pos


def _read_partition_tags(view: FetchResponseView, mv: memoryview, pos: int, end: int) -> int:
    """The partition's tagged fields into `view`; the position after them, or -1 if one is
    not as we write it."""
    view.leader_id = view.leader_epoch = -1
    view.diverging_epoch = view.snapshot_id = (-1, -1)
    count = mv[pos]
    pos += 1
    if count > 3:
        return -1
    for _ in range(count):
        tag = mv[pos]
        size = mv[pos + 1]
        pos += 2
        if pos + size > end or mv[pos + size - 1] != 0:
            return -1
        if tag == 0 and size == 13:
            view.diverging_epoch = _IQ.unpack_from(mv, pos)
        elif tag == 1 and size == 9:
            view.leader_id, view.leader_epoch = _II.unpack_from(mv, pos)
        elif tag == 2 and size == 13:
            end_offset, epoch = _QI.unpack_from(mv, pos)
            view.snapshot_id = (end_offset, epoch)
        else:
            return -1
        pos += size
    return pos


def _read_endpoints(found: dict[int, tuple[str, int]], mv: memoryview, pos: int) -> int:
    """node_endpoints into `found` ({node id: (host, port)}); the position after them."""
    n, pos = _uvarint(mv, pos)
    for _ in range(n - 1):
        (node_id,) = _I32.unpack_from(mv, pos)
        length, pos = _uvarint(mv, pos + 4)
        if length == 0:
            raise ValueError("null host")
        host = str(mv[pos : pos + length - 1], "utf-8")
        pos += length - 1
        (port,) = _I32.unpack_from(mv, pos)
        length, pos = _uvarint(mv, pos + 4)
        if length:  # a rack: checked as the generated decoder does, not kept
            str(mv[pos : pos + length - 1], "utf-8")
            pos += length - 1
        if mv[pos] != 0:
            raise ValueError("tagged fields in a node endpoint")
        pos += 1
        found[node_id] = (host, port)
    return pos
