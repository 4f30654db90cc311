"""The requests a broker sends the active controller about itself and its partitions, read off
the protocol into the QuorumController's types, and the controller's answers back: shared by
the networked controller (node/active_controller.py) and the simulated one
(sim/controller_host.py), so both take exactly what the broker's cores send.

    registration_of(req)                     BrokerRegistrationRequest -> BrokerRegistration
    heartbeat_of(req) / heartbeat_response(answer)
    isr_changes_of(version, req) -> (changes, where)
    alter_partition_response(where, answer)  results (or a top-level error) -> the response

No I/O and no state.
"""

from __future__ import annotations

import uuid
from typing import Any

from gregor.controller.quorum_controller import (
    BrokerHeartbeat,
    BrokerRegistration,
    HeartbeatResponse,
    IsrChange,
    IsrChangeResult,
    Listener,
)
from gregor.protocol import errors
from gregor.protocol.messages import AlterPartitionResponse, BrokerHeartbeatResponse

Where = list[tuple[uuid.UUID, int]]


def registration_of(req: Any) -> BrokerRegistration:
    return BrokerRegistration(
        req.broker_id,
        req.incarnation_id,
        tuple(Listener(li.name, li.host, li.port, li.security_protocol) for li in req.listeners),
        req.rack,
        tuple(req.log_dirs or ()),
    )


def heartbeat_of(req: Any) -> BrokerHeartbeat:
    return BrokerHeartbeat(
        req.broker_id,
        req.broker_epoch,
        req.current_metadata_offset,
        req.want_fence,
        req.want_shut_down,
        tuple(req.offline_log_dirs or ()),
    )


def heartbeat_response(answer: HeartbeatResponse) -> Any:
    return BrokerHeartbeatResponse(
        error_code=answer.error_code,
        is_caught_up=answer.is_caught_up,
        is_fenced=answer.is_fenced,
        should_shut_down=answer.should_shut_down,
    )


def isr_changes_of(version: int, req: Any) -> tuple[list[IsrChange], Where]:
    """The ISR changes an AlterPartition asks for, and which partition each is."""
    changes, where = [], []
    for t in req.topics:
        for pd in t.partitions:
            if version >= 3:
                isr = [b.broker_id for b in pd.new_isr_with_epochs]
                epochs = {b.broker_id: b.broker_epoch for b in pd.new_isr_with_epochs}
            else:
                isr, epochs = list(pd.new_isr), {}
            changes.append(
                IsrChange(t.topic_id, pd.partition_index, pd.leader_epoch, pd.partition_epoch, isr, epochs,
                          pd.leader_recovery_state)
            )  # fmt: skip
            where.append((t.topic_id, pd.partition_index))
    return changes, where


def alter_partition_response(where: Where, answer: list[IsrChangeResult] | int) -> Any:
    """The answer to an AlterPartition: a top-level error code, or one result per change."""
    R = AlterPartitionResponse
    if isinstance(answer, int):
        return R(error_code=answer, topics=[])
    topics: dict[uuid.UUID, list[Any]] = {}
    for (topic_id, index), res in zip(where, answer, strict=True):
        topics.setdefault(topic_id, []).append(
            R.PartitionData(
                partition_index=index, error_code=res.error_code, leader_id=res.leader,
                leader_epoch=res.leader_epoch, isr=list(res.isr), partition_epoch=res.partition_epoch,
            )
        )  # fmt: skip
    return R(
        error_code=errors.NONE,
        topics=[R.TopicData(topic_id=t, partitions=ps) for t, ps in topics.items()],
    )
