"""Active-active writes across regions: hybrid logical clock timestamps in record headers, and
a last-write-wins resolver whose result is the same in every region whatever order the records
arrive in.

- `HybridClock` (clock.py) and `Timestamp` with its 16-byte `hlc` header (timestamp.py);
- `stamp`, `observe`, `HlcProducer` (producing.py): stamp what you write, move the clock on
  what you read;
- `home_region` (routing.py): an entity's home region from its key, the same everywhere;
- `Resolver`, `merge` (resolver.py), with version vectors in `hlc-vv` (version_vector.py) to
  report concurrent writes;
- `ResolverProcess` (process.py): the resolver over Kafka topics (`gregor hlc resolve`).

A client library: nothing in the broker imports it; the pure parts read no clock of their own.
"""

from gregor.hlc.clock import ClockSkewError, HybridClock
from gregor.hlc.process import ResolverError, ResolverProcess
from gregor.hlc.producing import HlcProducer, observe, read_timestamp, stamp
from gregor.hlc.resolver import KeyState, Resolver, Write, merge, merge_views
from gregor.hlc.routing import home_region, murmur2
from gregor.hlc.timestamp import HeaderError, Timestamp

__all__ = [
    "ClockSkewError",
    "HeaderError",
    "HlcProducer",
    "HybridClock",
    "KeyState",
    "Resolver",
    "ResolverError",
    "ResolverProcess",
    "Timestamp",
    "Write",
    "home_region",
    "merge",
    "merge_views",
    "murmur2",
    "observe",
    "read_timestamp",
    "stamp",
]
