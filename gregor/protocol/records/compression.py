"""The batch compression codecs, by their attribute number, on cramjam (one C-backed library).

Kafka's framings: gzip is a gzip stream; snappy is either raw snappy (librdkafka) or the xerial
block framing the Java client writes (magic 0x82 'SNAPPY' 0x00, versions, then big-endian
length-prefixed raw blocks); lz4 is the LZ4 frame format; zstd is a zstd frame. We write raw
snappy and read both.
"""

from __future__ import annotations

import gzip
import struct

import cramjam

from gregor.protocol import errors
from gregor.protocol.errors import KafkaError

_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def compress(codec: int, data: bytes) -> bytes:
    if codec == 1:
        return bytes(cramjam.gzip.compress(data))
    if codec == 2:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == 3:
        return bytes(cramjam.lz4.compress(data))
    if codec == 4:
        return bytes(cramjam.zstd.compress(data))
    raise KafkaError(errors.UNSUPPORTED_COMPRESSION_TYPE, f"compression codec {codec} is unknown")


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    pos = 16  # magic (8) + version (4) + compatible version (4)
    out = bytearray()
    while pos < len(data):
        if pos + 4 > len(data):
            raise KafkaError(errors.CORRUPT_MESSAGE, "xerial snappy block length is cut short")
        (length,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if length < 0 or pos + length > len(data):
            raise KafkaError(errors.CORRUPT_MESSAGE, "xerial snappy block runs past the end")
        out += bytes(cramjam.snappy.decompress_raw(data[pos : pos + length]))
        pos += length
    return bytes(out)


def decompress(codec: int, data: bytes) -> bytes:
    try:
        if codec == 1:
            return gzip.decompress(data)
        if codec == 2:
            return _snappy_decompress(data)
        if codec == 3:
            return bytes(cramjam.lz4.decompress(data))
        if codec == 4:
            return bytes(cramjam.zstd.decompress(data))
    except KafkaError:
        raise
    except Exception as exc:  # the codecs raise their own types for damaged input
        raise KafkaError(errors.CORRUPT_MESSAGE, f"cannot decompress batch: {exc}") from exc
    raise KafkaError(errors.UNSUPPORTED_COMPRESSION_TYPE, f"compression codec {codec} is unknown")
