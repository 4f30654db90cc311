"""Codec throughput on the hot path: Produce requests in, Fetch responses out.

    python bench/protocol_codec.py [--seconds 1.0]

Prints decodes/s and encodes/s for a Produce request (1 topic, 1 partition, 16 KiB records
blob) and a Fetch response (1 topic, 8 partitions, 1 KiB records each), at a few versions.
The records are never copied: decode returns views, encode returns them as their own buffers.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gregor.protocol import codec  # noqa: E402
from gregor.protocol.messages import FetchResponse, ProduceRequest  # noqa: E402


def rate(fn: Callable[[], object], seconds: float) -> float:
    """Calls per CPU second (process time, so other load on the machine matters less), best of 5."""
    best = 0.0
    for _ in range(5):
        n = 0
        start = time.process_time()
        while True:
            for _ in range(100):
                fn()
            n += 100
            elapsed = time.process_time() - start
            if elapsed >= seconds / 5:
                break
        best = max(best, n / elapsed)
    return best


def produce_request() -> object:
    return ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="bench-topic",
                partition_data=[
                    ProduceRequest.PartitionProduceData(index=0, records=bytes(16 * 1024))
                ],
            )
        ],
    )


def fetch_response(version: int) -> object:
    partitions = [
        FetchResponse.PartitionData(
            partition_index=i,
            error_code=0,
            high_watermark=1000 + i,
            last_stable_offset=1000 + i,
            log_start_offset=0,
            aborted_transactions=None,
            records=bytes(1024),
        )
        for i in range(8)
    ]
    topic = FetchResponse.FetchableTopicResponse(topic="bench-topic", partitions=partitions)
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[topic])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    codec.compile_all()
    print(f"{'message':<40} {'decodes/s':>12} {'encodes/s':>12}")
    for version in (7, 9, 11):
        request = produce_request()
        frame = bytearray(codec.join(codec.encode_request(0, version, 1, "bench", request))[4:])
        dec = rate(lambda frame=frame: codec.decode_request(frame), args.seconds)
        enc = rate(
            lambda v=version, r=request: codec.encode_request(0, v, 1, "bench", r), args.seconds
        )
        print(f"{f'Produce v{version} request, 1 x 16 KiB':<40} {dec:>12,.0f} {enc:>12,.0f}")
    for version in (11, 12, 16):
        response = fetch_response(version)
        frame = bytearray(codec.join(codec.encode_response(1, version, 1, response))[4:])
        dec = rate(lambda v=version, f=frame: codec.decode_response(1, v, f), args.seconds)
        enc = rate(lambda v=version, r=response: codec.encode_response(1, v, 1, r), args.seconds)
        print(f"{f'Fetch v{version} response, 8 partitions':<40} {dec:>12,.0f} {enc:>12,.0f}")


if __name__ == "__main__":
    main()
