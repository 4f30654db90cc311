"""Metadata's partition arrays as bytes, kept per topic until what they say changes.

A Metadata answer for all topics names every partition. Built as one message object per
partition (with its three lists) and then encoded, 10,000 partitions cost ~28 ms of the loop per
answer, and their ~40,000 short-lived containers set off full garbage collections (the p99,
4x the p50). Here a topic's array is written straight to bytes, one `struct` call per
partition, and kept; the answer carries it as a `codec.EncodedArray`, which the generated
encoder writes as it is (schema/metadata.py: `partitions ... encoded`).

    array = arrays.partitions(replicas, store, info, version, listener)   # an EncodedArray

What a partition's entry says (the rules of `topic_response` in metadata.py, the reference):
hosted here: NONE, its leader, leader epoch and ISR, the topic's replicas; not hosted and the
store networked with the image naming it: `leader_error`, the image's leader (or -1), epoch,
replicas and ISR; else LEADER_NOT_AVAILABLE, -1, -1, the topic's replicas, no ISR. Offline
replicas are always empty.

A kept array is used again only while every input is the same: per (topic, version, listener),
the TopicInfo and its replicas list (replaced, never changed in place, on a change) and its
length, the image's TopicImage of the topic and its brokers (immutable: a change makes new
ones, so `is` tells), whether the store is networked, and the ReplicaManager's `state_stamp` of
the topic, which moves when a hosted partition is added or removed or its leader, leader epoch
or ISR is set (replication/partition.py `_Announced`). When only that stamp moved, the entries
of the partitions it lists as changed since (`changed_since`) are written again and the others
kept, unless it no longer knows or they are half the topic or more: then all are written.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gregor.metadata.image import MetadataImage
from gregor.metadata.store import TopicInfo
from gregor.protocol import api_keys, codec, errors
from gregor.protocol.codec import EncodedArray
from gregor.protocol.codegen import uvarint_bytes
from gregor.protocol.messages import MetadataResponse

# A class of layouts: (leader_epoch v7+, offline_replicas v5+, flexible v9+).
Layout = tuple[bool, bool, bool]
# Per layout, per (replicas << 20 | isr): the function writing a partition's entry.
_PACKERS: dict[Layout, dict[int, Callable[..., bytes]]] = {}
_I32 = struct.Struct(">i")
FIRST_FLEXIBLE = 9
# Arrays kept at most, per topic known (plus a few topics): past it all are dropped (deleted
# topics, many versions or listeners). Clients use one or two versions.
KEPT_PER_TOPIC = 16


def layout_of(version: int) -> Layout:
    return (version >= 7, version >= 5, version >= FIRST_FLEXIBLE)


def leader_error(image: MetadataImage, leader: int, listener: str | None, version: int) -> int:
    """NONE if the leader is a broker with the listener the request came in on; as Kafka
    otherwise: LEADER_NOT_AVAILABLE without a leader, LISTENER_NOT_FOUND (v6+; before,
    LEADER_NOT_AVAILABLE) when the leader lacks that listener."""
    if leader < 0:
        return errors.LEADER_NOT_AVAILABLE
    reg = image.brokers.get(leader)
    if listener is None or reg is None or any(e.name == listener for e in reg.listeners):
        return errors.NONE
    return errors.LISTENER_NOT_FOUND if version >= 6 else errors.LEADER_NOT_AVAILABLE


def _packer(layout: Layout, replicas: int, isr: int) -> Callable[..., bytes]:
    """One partition's entry in one `pack` call: error_code partition_index leader_id
    [leader_epoch] replica_nodes isr_nodes [offline_replicas] [tags], each array its length
    (int32, or flexible's unsigned varint of length + 1, one byte below 127) then its int32s;
    the offline array empty (length 0, or flexible's 1) and no tagged fields (0). The lengths
    given are those written (length + 1 when flexible)."""
    epoch, offline, flexible = layout
    if flexible and max(replicas, isr) >= 127:  # a length of more than one varint byte
        return _long_packer(layout, replicas, isr)
    count = "B" if flexible else "i"
    fmt = ">hii" + ("i" if epoch else "") + count + "i" * replicas + count + "i" * isr
    fmt += (count if offline else "") + ("B" if flexible else "")
    return struct.Struct(fmt).pack


def _long_packer(layout: Layout, replicas: int, isr: int) -> Callable[..., bytes]:
    """`_packer`'s function for flexible arrays of 127 and more: the same arguments."""
    epoch = layout[0]

    def pack(*args: int) -> bytes:
        at = 4 if epoch else 3
        out = bytearray(struct.pack(">hii", *args[:3]))
        if epoch:
            out += _I32.pack(args[3])
        for n in (replicas, isr):
            out += uvarint_bytes(n + 1)
            out += struct.pack(f">{n}i", *args[at + 1 : at + 1 + n])
            at += 1 + n
        out += b"\x01\x00"  # no offline replicas, no tagged fields
        return bytes(out)

    return pack


def encode_partitions(
    replicas: Any, store: Any, info: TopicInfo, version: int, listener: str | None
) -> bytes:
    """The bytes of `info`'s partitions array for `version` (module docstring), its length
    first. `replicas` is the ReplicaManager, `store` the metadata store."""
    entries = encode_entries(replicas, store, info, version, listener, range(len(info.replicas)))
    return _array_head(version, len(entries)) + b"".join(entries)


def _array_head(version: int, count: int) -> bytes:
    return uvarint_bytes(count + 1) if version >= FIRST_FLEXIBLE else _I32.pack(count)


def encode_entries(
    replicas: Any,
    store: Any,
    info: TopicInfo,
    version: int,
    listener: str | None,
    indexes: Iterable[int],
) -> list[bytes]:
    """The entries of `info`'s partitions of `indexes` in the array of `version`, in order."""
    layout = layout_of(version)
    epoch, offline, flexible = layout
    name = info.name
    image = store.image
    image_topic = image.topic(name)
    registered = image_topic.partitions if image_topic is not None and store.networked else {}
    hosted = replicas.partitions.get
    topic_replicas = info.replicas
    chunks: list[bytes] = []
    add = chunks.append
    packers = _PACKERS.setdefault(layout, {})
    tail: tuple[int, ...] = ((1, 0) if flexible else (0,)) if offline else ()
    bias = 1 if flexible else 0  # what a length is written as: length + 1 when flexible
    ok, not_available = errors.NONE, errors.LEADER_NOT_AVAILABLE
    for index in indexes:
        nodes = topic_replicas[index]
        p = hosted((name, index))
        if p is not None:
            error, leader, leader_epoch, isr = ok, p.leader_id, p.leader_epoch, p.isr
        else:
            reg = registered.get(index)
            if reg is None:
                error, leader, leader_epoch, isr = not_available, -1, -1, ()
            else:  # led by another node (or by none): what the metadata says
                error = leader_error(image, reg.leader, listener, version)
                leader = reg.leader if error == ok else -1
                leader_epoch, nodes, isr = reg.leader_epoch, reg.replicas, reg.isr
        n, k = len(nodes), len(isr)
        pack = packers.get((n << 20) | k)
        if pack is None:
            pack = packers[(n << 20) | k] = _packer(layout, n, k)
        if epoch:
            add(pack(error, index, leader, leader_epoch, n + bias, *nodes, k + bias, *isr, *tail))
        else:
            add(pack(error, index, leader, n + bias, *nodes, k + bias, *isr, *tail))
    return chunks


def read_partitions(array: EncodedArray) -> list[Any]:
    """The array's entries as MetadataResponsePartition objects (for readers of an answer):
    decoded from its bytes, in an answer of one topic of its version."""
    topic = MetadataResponse.MetadataResponseTopic(error_code=0, name="", partitions=array)
    body = MetadataResponse(brokers=[], topics=[topic])
    data = codec.join(codec.encode_body(api_keys.METADATA, array.version, "response", body))
    decoded = codec.decode_body(api_keys.METADATA, array.version, "response", data)
    return list(decoded.topics[0].partitions)


@dataclass(slots=True)
class _Kept:
    inputs: tuple[Any, ...]  # all but the state stamp
    stamp: int  # the ReplicaManager's state_stamp of the topic
    entries: list[bytes]
    array: EncodedArray


class PartitionArrays:
    """A node's kept partition arrays (module docstring): one per Services."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, int, str | None], _Kept] = {}  # (topic, version, listener)

    def partitions(
        self, replicas: Any, store: Any, info: TopicInfo, version: int, listener: str | None
    ) -> EncodedArray:
        image = store.image
        name = info.name
        count = len(info.replicas)
        inputs = (info, info.replicas, count, image.topic(name), image.brokers, store.networked)
        stamp = replicas.state_stamp(name)
        key = (name, version, listener)
        kept = self._kept.get(key)
        entries = None
        if kept is not None and _same(kept.inputs, inputs):
            if kept.stamp == stamp:
                return kept.array
            changed = replicas.changed_since(name, kept.stamp)
            again = sorted({i for i in changed if i < count}) if changed is not None else None
            if again is not None and len(again) < count // 2:  # else all, in order
                entries = list(kept.entries)
                made = encode_entries(replicas, store, info, version, listener, again)
                for index, entry in zip(again, made, strict=True):
                    entries[index] = entry
        if entries is None:
            entries = encode_entries(replicas, store, info, version, listener, range(count))
        data = _array_head(version, count) + b"".join(entries)
        array = EncodedArray(version, count, data, read_partitions)
        if len(self._kept) >= KEPT_PER_TOPIC * (len(store.topics) + 4):
            self._kept.clear()
        self._kept[key] = _Kept(inputs, stamp, entries, array)
        return array


def _same(kept: tuple[Any, ...], now: tuple[Any, ...]) -> bool:
    """The same objects (`is`: each is replaced, not changed, when what it says changes) and
    the same numbers."""
    return all(a is b or (type(a) is int and a == b) for a, b in zip(kept, now, strict=True))
