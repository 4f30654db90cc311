"""What the protocol layer raises: one type per thing the caller must handle differently.

- `CorruptFrameError`: the bytes are not a valid encoding (truncated, a length past the end, a
  negative length where none is allowed, invalid UTF-8, ...). The message says which field and
  at which offset. Kafka answers such a request by closing the connection.
- `FrameTooLargeError` (a `CorruptFrameError`): a size prefix above `socket.request.max.bytes`
  or below zero.
- `UnsupportedVersionError`: the header names an API or version we do not serve; it carries the
  decoded header so the caller can answer (ApiVersions) or log and close (anything else).
- `EncodeError`: a message object that cannot be encoded (a wrong type, a number out of range,
  None in a non-nullable field); raised to the handler that built it, naming the field.
"""

from __future__ import annotations

from typing import Any


class ProtocolError(Exception):
    """Base of the protocol layer's own exceptions."""


class CorruptFrameError(ProtocolError, ValueError):
    """Bytes that do not decode as what they claim to be."""


class FrameTooLargeError(CorruptFrameError):
    """A size prefix outside 0..socket.request.max.bytes."""


class UnsupportedVersionError(ProtocolError):
    """A request for an API key or version we do not serve; `header` is the decoded header."""

    def __init__(self, header: Any, message: str) -> None:
        super().__init__(message)
        self.header = header


class EncodeError(ProtocolError, ValueError):
    """A message object that cannot be encoded as the version asked for."""
