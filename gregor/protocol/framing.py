"""Kafka's framing: every request and response is `size:int32` followed by `size` bytes.

    Frame => size:int32 payload:bytes[size]
    Request payload => RequestHeader RequestBody     (see headers.py)
    Response payload => ResponseHeader ResponseBody

Kafka closes the connection on a size below zero or above `socket.request.max.bytes` (default
104857600), before reading the payload: `read_frame_size` does that check on the 4 prefix
bytes. `FrameSplitter` is a sans-I/O accumulator for the runtime: feed it what the socket
gave, get back whole frames, each in its own bytearray, so that decoded `records` (views into
the frame) stay valid for as long as the request lives; a frame buffer is never reused.
"""

from __future__ import annotations

import struct

from gregor.protocol.exceptions import FrameTooLargeError

SIZE_BYTES = 4
DEFAULT_MAX_REQUEST_BYTES = 104857600  # socket.request.max.bytes

_SIZE = struct.Struct(">i")


def read_frame_size(prefix: bytes | bytearray | memoryview, max_bytes: int) -> int:
    """The size in a 4-byte prefix, checked against `max_bytes` (socket.request.max.bytes)."""
    if len(prefix) < SIZE_BYTES:
        raise FrameTooLargeError(f"size prefix needs 4 bytes, got {len(prefix)}")
    (size,) = _SIZE.unpack_from(prefix, 0)
    check_frame_size(size, max_bytes)
    return int(size)


def check_frame_size(size: int, max_bytes: int) -> None:
    if size < 0:
        raise FrameTooLargeError(f"negative frame size {size}")
    if size > max_bytes:
        raise FrameTooLargeError(
            f"frame of {size} bytes is larger than socket.request.max.bytes ({max_bytes})"
        )


def size_prefix(size: int) -> bytes:
    return _SIZE.pack(size)


class FrameSplitter:
    """Turns a byte stream into frames (without their size prefix), checking every size."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> None:
        self.max_bytes = max_bytes
        self._pending = bytearray()
        self._frame: bytearray | None = None  # the frame being filled, once its size is known
        self._filled = 0

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """Whole frames completed by `data`, each a memoryview over its own bytearray."""
        frames: list[memoryview] = []
        view = memoryview(data)
        while True:
            if self._frame is None:
                if not len(view):
                    break
                need = SIZE_BYTES - len(self._pending)
                self._pending += view[:need]
                view = view[need:]
                if len(self._pending) < SIZE_BYTES:
                    break
                size = read_frame_size(self._pending, self.max_bytes)
                self._pending.clear()
                self._frame = bytearray(size)
                self._filled = 0
            take = min(len(self._frame) - self._filled, len(view))
            self._frame[self._filled : self._filled + take] = view[:take]
            self._filled += take
            view = view[take:]
            if self._filled < len(self._frame):
                break
            frames.append(memoryview(self._frame))
            self._frame = None
            self._filled = 0
        return frames

    @property
    def buffered_bytes(self) -> int:
        return len(self._pending) + self._filled
