#!/usr/bin/env python
"""A server that does no broker work, for client benchmarks: what the client gets when the broker
costs next to nothing.

    python bench/null_broker.py --port 0 [--partitions 8]     # prints "listening HOST:PORT"

A Kafka-protocol server for bench/client_ceiling.py: it speaks just enough of the protocol for
bench/kclient.py's producer and assign()-consumer (ApiVersions, Metadata, CreateTopics,
Produce, ListOffsets, Fetch) and does no broker work: no validation, no CRC check, no disk, no
index, no replication. A produced batch is kept in memory as received (its base offset patched,
as any broker must); a fetch answers the kept batches from the asked offset. It is plain
Python (asyncio streams, one copy per batch), so a broker with leaner I/O can pass it with large
records; with small ones the client limits both. Not a product: it loses
everything on exit, and it trusts its input.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import inspect
import os
import struct
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gregor.protocol import api_keys  # noqa: E402
from gregor.protocol.codec import decode_request, encode_response  # noqa: E402
from gregor.protocol.messages import (  # noqa: E402
    ApiVersionsResponse,
    CreateTopicsResponse,
    FetchResponse,
    ListOffsetsResponse,
    MetadataResponse,
    ProduceResponse,
)

# What the server offers: versions a 2.x librdkafka uses, without topic ids (Fetch <= 12).
OFFERED = {
    api_keys.PRODUCE: (3, 9),
    api_keys.FETCH: (4, 12),
    api_keys.LIST_OFFSETS: (1, 7),
    api_keys.METADATA: (1, 12),
    api_keys.API_VERSIONS: (0, 3),
    api_keys.CREATE_TOPICS: (2, 7),
}
_COUNT_AT = 57  # a v2 batch header: records count (int32) at byte 57; base offset at 0


class Partition:
    """Batches kept as received: base offsets (ascending) and the bytes, one list each."""

    def __init__(self) -> None:
        self.bases: list[int] = []
        self.batches: list[bytearray] = []
        self.end = 0

    def append(self, records: Any) -> int:
        base = self.end
        view = memoryview(records)
        pos = 0
        while pos + 61 <= view.nbytes:
            length = struct.unpack_from(">i", view, pos + 8)[0]
            batch = bytearray(view[pos : pos + 12 + length])
            struct.pack_into(">q", batch, 0, self.end)
            self.bases.append(self.end)
            self.batches.append(batch)
            self.end += struct.unpack_from(">i", batch, _COUNT_AT)[0]
            pos += 12 + length
        return base

    def read(self, offset: int, max_bytes: int) -> list[bytearray]:
        i = max(0, bisect.bisect_right(self.bases, offset) - 1)
        out, size = [], 0
        while i < len(self.batches) and (not out or size + len(self.batches[i]) <= max_bytes):
            out.append(self.batches[i])
            size += len(self.batches[i])
            i += 1
        return out


class NullBroker:
    def __init__(self, host: str, port: int, partitions: int) -> None:
        self.host, self.port = host, port
        self.default_partitions = partitions
        self.topics: dict[str, list[Partition]] = {}
        self.waiting: list[asyncio.Future[None]] = []

    def topic(self, name: str, partitions: int | None = None) -> list[Partition]:
        if name not in self.topics:
            n = partitions if partitions and partitions > 0 else self.default_partitions
            self.topics[name] = [Partition() for _ in range(n)]
        return self.topics[name]

    def api_versions(self, _req: Any, _v: int) -> Any:
        row = ApiVersionsResponse.ApiVersion
        return ApiVersionsResponse(
            error_code=0,
            api_keys=[
                row(api_key=k, min_version=a, max_version=b) for k, (a, b) in OFFERED.items()
            ],
        )

    def metadata(self, req: Any, _v: int) -> Any:
        names = [t.name for t in req.topics] if req.topics is not None else list(self.topics)
        part = MetadataResponse.MetadataResponsePartition
        topics = [
            MetadataResponse.MetadataResponseTopic(
                error_code=0,
                name=name,
                partitions=[
                    part(
                        error_code=0,
                        partition_index=i,
                        leader_id=1,
                        leader_epoch=0,
                        replica_nodes=[1],
                        isr_nodes=[1],
                        offline_replicas=[],
                    )
                    for i in range(len(self.topic(name)))
                ],
            )
            for name in names
        ]
        broker = MetadataResponse.MetadataResponseBroker(node_id=1, host=self.host, port=self.port)
        return MetadataResponse(brokers=[broker], cluster_id="null", controller_id=1, topics=topics)

    def create_topics(self, req: Any, _v: int) -> Any:
        out = []
        for t in req.topics:
            self.topic(t.name, t.num_partitions)
            out.append(CreateTopicsResponse.CreatableTopicResult(name=t.name, error_code=0))
        return CreateTopicsResponse(topics=out)

    def produce(self, req: Any, _v: int) -> Any:
        answers = []
        for t in req.topic_data:
            parts = self.topic(t.name)
            rows = [
                ProduceResponse.PartitionProduceResponse(
                    index=p.index, error_code=0, base_offset=parts[p.index].append(p.records)
                )
                for p in t.partition_data
            ]
            answers.append(
                ProduceResponse.TopicProduceResponse(name=t.name, partition_responses=rows)
            )
        for fut in self.waiting:
            if not fut.done():
                fut.set_result(None)
        self.waiting.clear()
        return ProduceResponse(responses=answers) if req.acks else None

    def list_offsets(self, req: Any, _v: int) -> Any:
        out = []
        for t in req.topics:
            parts = self.topic(t.name)
            rows = [
                ListOffsetsResponse.ListOffsetsPartitionResponse(
                    partition_index=p.partition_index,
                    error_code=0,
                    offset=0 if p.timestamp == -2 else parts[p.partition_index].end,
                    leader_epoch=0,
                )
                for p in t.partitions
            ]
            out.append(ListOffsetsResponse.ListOffsetsTopicResponse(name=t.name, partitions=rows))
        return ListOffsetsResponse(topics=out)

    def fetch_now(self, req: Any) -> tuple[Any, int]:
        topics, total = [], 0
        for t in req.topics:
            parts = self.topic(t.topic)
            rows = []
            for p in t.partitions:
                part = parts[p.partition]
                batches = part.read(p.fetch_offset, p.partition_max_bytes)
                total += sum(len(b) for b in batches)
                rows.append(
                    FetchResponse.PartitionData(
                        partition_index=p.partition,
                        error_code=0,
                        high_watermark=part.end,
                        last_stable_offset=part.end,
                        log_start_offset=0,
                        records=b"".join(batches) if batches else None,
                    )
                )
            topics.append(FetchResponse.FetchableTopicResponse(topic=t.topic, partitions=rows))
        return FetchResponse(error_code=0, session_id=0, responses=topics), total

    async def fetch(self, req: Any, _v: int) -> Any:
        body, total = self.fetch_now(req)
        if total == 0 and req.max_wait_ms > 0:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.waiting.append(fut)
            try:
                await asyncio.wait_for(fut, req.max_wait_ms / 1000)
            except TimeoutError:
                pass
            body, total = self.fetch_now(req)
        return body

    async def serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        handlers = {
            api_keys.API_VERSIONS: self.api_versions,
            api_keys.METADATA: self.metadata,
            api_keys.CREATE_TOPICS: self.create_topics,
            api_keys.PRODUCE: self.produce,
            api_keys.LIST_OFFSETS: self.list_offsets,
        }
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                header, req = decode_request(frame)
                key, version = header.request_api_key, header.request_api_version
                if key == api_keys.FETCH:
                    body = await self.fetch(req, version)
                else:
                    body = handlers[key](req, version)
                    if inspect.isawaitable(body):  # a subclass's handler may wait
                        body = await body
                if body is not None:
                    writer.writelines(encode_response(key, version, header.correlation_id, body))
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def amain(args: argparse.Namespace) -> None:
    broker = NullBroker(args.host, args.port, args.partitions)
    server = await asyncio.start_server(broker.serve_connection, args.host, args.port)
    broker.port = server.sockets[0].getsockname()[1]
    print(f"listening {args.host}:{broker.port}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--partitions", type=int, default=1, help="of a topic first named by a client")
    args = ap.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    try:
        asyncio.run(amain(args))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
