"""A MetadataImage as the records that rebuild it: what a metadata snapshot holds (the part of
Kafka's ImageWriter we have), and the image a snapshot's records replay to.

Order (each section only when there is something in it):

    FeatureLevelRecord        every finalized feature, metadata.version first
    RegisterBrokerRecord      one per broker: the whole registration, fenced and
                              in-controlled-shutdown state and log dirs included
    TopicRecord               per topic (by name), then a PartitionRecord per partition,
    PartitionRecord           whole (leader and partition epochs, directories, ...)
    ConfigRecord              per (resource type, resource name, config name), sorted
    ProducerIdsRecord         the next producer id, if any was ever handed out
    UserScramCredentialRecord per (user, mechanism), sorted
    AccessControlEntryRecord  per ACL, by id
    ClientQuotaRecord         per (entity, key), sorted

Replaying these onto the empty image gives back an image equal to the one written, except for
`offset` and `epoch`: a snapshot knows only its end offset and epoch, so the rebuilt image has
offset = end offset - 1 and the snapshot's epoch (`from_snapshot`). A snapshot is taken outside
any metadata transaction (transactions.py), so one holding a transaction marker is refused, as
Kafka refuses it.
"""

from __future__ import annotations

import uuid
from typing import Any

from gregor.metadata import records as r
from gregor.metadata.image import EMPTY_IMAGE, METADATA_VERSION, MetadataImage, MetadataReplayError
from gregor.raft import snapshot_file
from gregor.raft.log import SnapshotId
from gregor.security.acls import AclBinding

_MARKERS = (r.BeginTransactionRecord, r.EndTransactionRecord, r.AbortTransactionRecord)


def image_records(image: MetadataImage) -> list[Any]:
    out: list[Any] = []
    for name in sorted(image.features, key=lambda n: (n != METADATA_VERSION, n)):
        out.append(r.FeatureLevelRecord(name=name, feature_level=image.features[name]))
    out += _broker_records(image)
    out += _topic_records(image)
    for resource_type, resource_name in sorted(image.configs):
        configs = image.configs[(resource_type, resource_name)]
        for key in sorted(configs):
            out.append(
                r.ConfigRecord(
                    resource_type=resource_type,
                    resource_name=resource_name,
                    name=key,
                    value=configs[key],
                )
            )
    if image.next_producer_id > 0:
        out.append(
            r.ProducerIdsRecord(
                broker_id=-1, broker_epoch=-1, next_producer_id=image.next_producer_id
            )
        )
    for (user, mechanism), cred in sorted(image.scram.items()):
        out.append(
            r.UserScramCredentialRecord(
                name=user,
                mechanism=mechanism,
                salt=cred.salt,
                stored_key=cred.stored_key,
                server_key=cred.server_key,
                iterations=cred.iterations,
            )
        )
    out += acl_records(image)
    out.extend(_client_quota_records(image))
    return out


def _broker_records(image: MetadataImage) -> list[Any]:
    """A RegisterBrokerRecord per registered broker, in id order."""
    out: list[Any] = []
    for broker_id in sorted(image.brokers):
        reg = image.brokers[broker_id]
        out.append(
            r.RegisterBrokerRecord(
                broker_id=reg.broker_id,
                incarnation_id=reg.incarnation_id,
                broker_epoch=reg.epoch,
                end_points=[
                    r.BrokerEndpoint(
                        name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol
                    )
                    for e in reg.listeners
                ],
                features=[
                    r.BrokerFeature(name=n, min_supported_version=lo, max_supported_version=hi)
                    for n, lo, hi in reg.features
                ],
                rack=reg.rack,
                fenced=reg.fenced,
                in_controlled_shutdown=reg.in_controlled_shutdown,
                log_dirs=list(reg.log_dirs),
            )
        )
    return out


def _topic_records(image: MetadataImage) -> list[Any]:
    """Each topic's TopicRecord and its PartitionRecords, topics by name, partitions in order."""
    out: list[Any] = []
    for name in sorted(image.topics_by_name):
        topic = image.topics_by_id[image.topics_by_name[name]]
        out.append(r.TopicRecord(name=topic.name, topic_id=topic.topic_id))
        for index in sorted(topic.partitions):
            p = topic.partitions[index]
            out.append(
                r.PartitionRecord(
                    partition_id=index,
                    topic_id=topic.topic_id,
                    replicas=list(p.replicas),
                    isr=list(p.isr),
                    removing_replicas=list(p.removing_replicas),
                    adding_replicas=list(p.adding_replicas),
                    leader=p.leader,
                    leader_recovery_state=p.leader_recovery_state,
                    leader_epoch=p.leader_epoch,
                    partition_epoch=p.partition_epoch,
                    directories=list(p.directories),
                )
            )
    return out


def acl_records(image: MetadataImage) -> list[Any]:
    return [acl_record(acl_id, acl) for acl_id, acl in sorted(image.acls.items())]


def acl_record(acl_id: uuid.UUID, acl: AclBinding) -> Any:
    """The AccessControlEntryRecord of an ACL (a snapshot's, and the controller's CreateAcls)."""
    return r.AccessControlEntryRecord(
        id=acl_id,
        resource_type=acl.resource_type,
        resource_name=acl.name,
        pattern_type=acl.pattern_type,
        principal=acl.principal,
        host=acl.host,
        operation=acl.operation,
        permission_type=acl.permission,
    )


def _client_quota_records(image: MetadataImage) -> list[Any]:
    E = r.ClientQuotaRecord.EntityData
    return [
        r.ClientQuotaRecord(
            entity=[E(entity_type=t, entity_name=n) for t, n in ent],
            key=key,
            value=value,
            remove=False,
        )
        for ent, values in sorted(image.client_quotas.items(), key=lambda kv: repr(kv[0]))
        for key, value in sorted(values.items())
    ]


def replay_snapshot_records(records: list[Any], snapshot_id: SnapshotId) -> MetadataImage:
    """The image the records of snapshot `snapshot_id` rebuild (from the empty image)."""
    last = snapshot_id.end_offset - 1
    return EMPTY_IMAGE.replay((rec, last, snapshot_id.epoch) for rec in records)


def encode_snapshot(
    image: MetadataImage, epoch: int, last_contained_log_timestamp: int, now_ms: int
) -> bytes:
    """The `.checkpoint` file of `image` (snapshot_file.py's layout)."""
    return snapshot_file.encode(
        [r.encode(rec) for rec in image_records(image)], epoch, last_contained_log_timestamp, now_ms
    )


def from_snapshot(data: bytes, snapshot_id: SnapshotId) -> MetadataImage:
    """The image in a `.checkpoint` file; SnapshotFormatError, MetadataRecordError or
    MetadataReplayError if it is not one."""
    contents = snapshot_file.decode(data)
    records = [r.decode(d) for d in contents.records]
    for rec in records:
        if isinstance(rec, _MARKERS):
            raise MetadataReplayError(f"{type(rec).__name__} cannot appear within a snapshot")
    return replay_snapshot_records(records, snapshot_id)


def check_snapshot(data: bytes) -> str | None:
    """What is wrong with a metadata snapshot file; None if it loads."""
    try:
        from_snapshot(data, SnapshotId(1, 0))
    except ValueError as exc:  # SnapshotFormatError, MetadataRecordError, MetadataReplayError
        return f"{type(exc).__name__}: {exc}"
    return None
