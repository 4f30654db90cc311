"""In-process replicas for the replication tests: one ReplicaManager (its own log dir) per
broker, and a Fetch served by a leader `Partition` the way the fetch handler serves it, so the
follower side (follower.py) runs against the real leader side without sockets."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from gregor.metadata.image import PartitionRegistration
from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.messages import FetchResponse, ProduceRequest
from gregor.protocol.records.batch import iter_headers
from gregor.protocol.records.records import build_batch
from gregor.replication.partition import BrokerLiveness, Partition, ReplicaManager
from gregor.storage.config import LogConfig
from gregor.storage.log_manager import LogManager

TOPIC = "t"
TOPIC_ID = uuid.UUID(int=42)
NOW = 1_700_000_000_000


class Cluster:
    """What the metadata says of the brokers (liveness, epochs), shared by every replica."""

    def __init__(self, brokers: tuple[int, ...] = (1, 2, 3)) -> None:
        self.epochs = {b: 100 + b for b in brokers}
        self.fenced: set[int] = set()

    def liveness(self, broker_id: int) -> BrokerLiveness:
        epoch = self.epochs.get(broker_id)
        if epoch is None:
            return BrokerLiveness(-1, False)
        return BrokerLiveness(epoch, broker_id not in self.fenced)


def manager(tmp_path: Path, node_id: int, cluster: Cluster, lag_ms: int = 10_000) -> ReplicaManager:
    logs = LogManager([str(tmp_path / f"node-{node_id}")], LogConfig())
    logs.startup()
    return ReplicaManager(
        node_id,
        logs,
        liveness=cluster.liveness,
        local_broker_epoch=lambda: cluster.epochs[node_id],
        replica_lag_time_max_ms=lag_ms,
    )


def registration(
    leader: int, leader_epoch: int = 0, isr: tuple[int, ...] = (1, 2, 3), partition_epoch: int = 0,
    replicas: tuple[int, ...] = (1, 2, 3),
) -> PartitionRegistration:  # fmt: skip
    return PartitionRegistration(
        replicas=replicas,
        isr=isr,
        leader=leader,
        leader_epoch=leader_epoch,
        partition_epoch=partition_epoch,
    )


def host(
    rm: ReplicaManager, reg: PartitionRegistration, now_ms: int = NOW, min_isr: int = 1
) -> Partition:
    return rm.apply(TOPIC, 0, TOPIC_ID, reg, LogConfig(), min_isr, now_ms)


def records(n: int, start: int = 0) -> bytearray:
    return build_batch(
        [(f"k{i}".encode(), f"v{i}".encode()) for i in range(start, start + n)], base_timestamp=NOW
    )


def produce_request(topic: str, index: int) -> Any:
    """An acks=1 Produce of one record to one partition, as a client sends it."""
    return ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout_ms=5_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    ProduceRequest.PartitionProduceData(index=index, records=records(1))
                ],
            )
        ],
    )


def produce(p: Partition, n: int, now_ms: int = NOW, acks: int = -1) -> int:
    """Append one batch of `n` records as leader; its last offset."""
    return p.append_as_leader(records(n), acks, now_ms).last_offset


def serve_fetch(leader: Partition | None, request: Any, now_ms: int) -> Any:
    """A leader's answer to a follower's Fetch for its one partition (as handlers/fetch.py)."""
    parts = []
    replica = request.replica_state
    for t in request.topics:
        for fp in t.partitions:
            pd = FetchResponse.PartitionData(partition_index=fp.partition, records=b"")
            if leader is None:
                pd.error_code = errors.NOT_LEADER_OR_FOLLOWER
            else:
                lg = leader.log
                pd.high_watermark, pd.log_start_offset = lg.high_watermark, lg.log_start_offset
                try:
                    read = leader.fetch_for_follower(
                        replica.replica_id, replica.replica_epoch, fp.fetch_offset, fp.last_fetched_epoch,
                        fp.current_leader_epoch, fp.log_start_offset, fp.partition_max_bytes, True, now_ms,
                    )  # fmt: skip
                    pd.high_watermark = read.high_watermark
                    pd.log_start_offset = read.log_start_offset
                    if read.diverging_epoch is not None:
                        pd.diverging_epoch = FetchResponse.EpochEndOffset(
                            epoch=read.diverging_epoch[0], end_offset=read.diverging_epoch[1]
                        )
                    if read.records is not None:
                        pd.records = bytearray(read.records.read())
                except KafkaError as exc:
                    pd.error_code = exc.code
            parts.append(pd)
    return FetchResponse(
        error_code=errors.NONE,
        responses=[FetchResponse.FetchableTopicResponse(topic_id=TOPIC_ID, partitions=parts)],
    )


def log_bytes(p: Partition) -> bytes:
    """Every batch of the log (a read stops at a segment's end: read on from there)."""
    out = b""
    offset = p.log.log_start_offset
    while offset < p.log.log_end_offset:
        chunk = p.log.read_bytes(offset, 1 << 30)
        assert chunk, f"nothing to read at {offset}"
        out += chunk
        *_, (_, last) = iter_headers(chunk)
        offset = last.last_offset + 1
    return out
