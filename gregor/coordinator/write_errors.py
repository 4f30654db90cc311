"""What a coordinator tells its client when its own records could not be appended (Kafka's
mapping, shared by the group and the transaction coordinators)."""

from __future__ import annotations

from gregor.protocol.errors import BY_NAME


def _codes(*names: str) -> frozenset[int]:
    return frozenset(BY_NAME[n].code for n in names)


_UNAVAILABLE = _codes(
    "UNKNOWN_TOPIC_OR_PARTITION",
    "NOT_ENOUGH_REPLICAS",
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
    "REQUEST_TIMED_OUT",
)
_MOVED = _codes("NOT_LEADER_OR_FOLLOWER", "KAFKA_STORAGE_ERROR")
_INTERNAL = _codes("MESSAGE_TOO_LARGE", "RECORD_LIST_TOO_LARGE", "INVALID_FETCH_SIZE")


class CoordinatorWriteError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def append_error_to_response_error(code: int) -> int:
    """The error a client gets for an append that failed with `code`."""
    if code in _UNAVAILABLE:
        return BY_NAME["COORDINATOR_NOT_AVAILABLE"].code
    if code in _MOVED:
        return BY_NAME["NOT_COORDINATOR"].code
    if code in _INTERNAL:
        return BY_NAME["UNKNOWN_SERVER_ERROR"].code
    return code
