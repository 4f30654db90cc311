"""Every request and response class, by Kafka's name.

    from gregor.protocol.messages import ProduceResponse

    ProduceResponse(responses=[ProduceResponse.TopicProduceResponse(name="t", ...)])

The classes are generated from `schema/` when `codec` is imported; a message's structs are
attributes of its class (`ProduceResponse.PartitionProduceResponse`). Static type checkers see
them as `Any`.
"""

from __future__ import annotations

from typing import Any

from gregor.protocol.codec import CLASSES

globals().update(CLASSES)


def __getattr__(name: str) -> Any:
    # (asked for `__path__` by every `from gregor.protocol.messages import X` in a function:
    # one exception raised, not a KeyError turned into one)
    found = CLASSES.get(name)
    if found is None:
        raise AttributeError(f"no message class {name!r}")
    return found


def __dir__() -> list[str]:
    return sorted([*CLASSES, "CLASSES"])
