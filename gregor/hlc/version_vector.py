"""Version vectors in the optional record header `hlc-vv`, to tell concurrent writes apart.

A version vector maps a node id to how many writes of that node to this key the writer had
seen (its own included). Write b descends from write a when a's vector is <= b's in every entry
(b's writer had seen a); two writes neither of which descends from the other are concurrent: a
conflict that last-write-wins would otherwise resolve silently.

Header `hlc-vv`: entries sorted by node id, 12 bytes each, big-endian, unsigned:

    (node_id:uint32 counter:uint64)*

An empty value is the empty vector. Entries with counter 0 are left out.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping

from gregor.hlc.timestamp import HeaderError

HEADER = "hlc-vv"
_ENTRY = struct.Struct(">IQ")

VersionVector = tuple[tuple[int, int], ...]
"""(node_id, counter) pairs sorted by node id, counters above 0: hashable, one spelling each."""


def make(entries: Mapping[int, int] | Iterable[tuple[int, int]]) -> VersionVector:
    """The canonical vector of `entries` (node id -> counter)."""
    pairs = entries.items() if isinstance(entries, Mapping) else entries
    out: dict[int, int] = {}
    for node, counter in pairs:
        if counter < 0:
            raise ValueError(f"version vector counter must be 0 or more: node {node}: {counter}")
        if counter:
            out[node] = max(out.get(node, 0), counter)
    return tuple(sorted(out.items()))


def descends(later: VersionVector, earlier: VersionVector) -> bool:
    """True when `later` has seen everything `earlier` has (later >= earlier entrywise)."""
    have = dict(later)
    return all(have.get(node, 0) >= counter for node, counter in earlier)


def concurrent(a: VersionVector, b: VersionVector) -> bool:
    """Neither descends from the other."""
    return not descends(a, b) and not descends(b, a)


def merge(a: VersionVector, b: VersionVector) -> VersionVector:
    """The entrywise maximum: what a writer that has seen both has seen."""
    return make([*a, *b])


def bump(vv: VersionVector, node_id: int) -> VersionVector:
    """`vv` with one more write by `node_id`: the vector of a write that follows `vv`."""
    entries = dict(vv)
    entries[node_id] = entries.get(node_id, 0) + 1
    return make(entries)


def encode(vv: VersionVector) -> bytes:
    return b"".join(_ENTRY.pack(node, counter) for node, counter in make(vv))


def decode(data: bytes | bytearray | memoryview | None) -> VersionVector:
    if data is None:
        raise HeaderError(f"header {HEADER!r} has no value")
    if len(data) % _ENTRY.size:
        raise HeaderError(
            f"header {HEADER!r} must be a multiple of {_ENTRY.size} bytes "
            f"(node_id:4 counter:8 per entry), got {len(data)}"
        )
    entries = [_ENTRY.unpack_from(data, i) for i in range(0, len(data), _ENTRY.size)]
    nodes = [node for node, _ in entries]
    if nodes != sorted(set(nodes)):
        raise HeaderError(f"header {HEADER!r}: node ids must be sorted and distinct: {nodes}")
    return make(entries)
