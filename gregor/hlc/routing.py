"""An entity's home region, chosen from its key the same way in every process and region.

`home_region(key, regions)` is rendezvous (highest-random-weight) hashing: each region scores
`murmur2(region + b"\\0" + key)` and the highest score wins (ties, never seen in practice, go to
the smaller name). The answer does not depend on the order the regions are listed in, and
adding or removing a region moves only the keys that region wins or won (about 1/n of them), so
applications that write each entity only in its home region avoid conflicts by construction.

`murmur2` is Kafka's (the Java client's default partitioner, `Utils.murmur2`), so its values are
known and the same in Python, Java and librdkafka's murmur2 partitioner; Python's `hash()` is
salted per process and would not do.
"""

from __future__ import annotations

from collections.abc import Iterable

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 of `data`, as a signed int (as Java returns it)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length % 4
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's `Utils.toPositive`: the low 31 bits."""
    return n & 0x7FFFFFFF


def home_region(key: bytes | str, regions: Iterable[str]) -> str:
    """The region whose writers own `key` (rendezvous hashing over murmur2)."""
    names = sorted(set(regions))
    if not names:
        raise ValueError("home_region: no regions configured")
    kb = key.encode() if isinstance(key, str) else bytes(key)
    return max(names, key=lambda r: (to_positive(murmur2(r.encode() + b"\0" + kb)), _neg(r)))


def _neg(name: str) -> tuple[int, ...]:
    """Orders names in reverse, so that `max` gives ties to the smaller name."""
    return tuple(-b for b in name.encode())
