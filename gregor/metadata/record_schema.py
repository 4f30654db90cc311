"""Our declarations of the KRaft metadata records (the values in `__cluster_metadata`), in the
language of `gregor/protocol/schema/dsl.py`.

Every record is flexible in every version (compact strings and arrays, a tagged-field section
at the end of each struct). Field names, types, versions, tags and defaults are those of Kafka's
`metadata/src/main/resources/common/metadata/*.json`; the declarations are our own. `WRITE`
is the version we write of each: the one a Kafka 4.0 cluster at its default metadata.version
(4.0-IV3, eligible leader replicas off) writes. Every declared version is read.

    key  record                          versions  we write
    0    RegisterBrokerRecord            0-3       3  (v1: InControlledShutdown, v2:
                                                       IsMigratingZkBroker, v3: LogDirs tag 0)
    1    UnregisterBrokerRecord          0         0
    2    TopicRecord                     0         0
    3    PartitionRecord                 0-2       1  (v1: Directories, v2: ELR tags 1-2)
    4    ConfigRecord                    0         0
    5    PartitionChangeRecord           0-2       1  (v1: Directories tag 8, v2: ELR tags 6-7)
    7    FenceBrokerRecord               0         0
    8    UnfenceBrokerRecord             0         0
    9    RemoveTopicRecord               0         0
    11   UserScramCredentialRecord       0         0  (a user's SCRAM credential for one
    22   RemoveUserScramCredentialRecord 0         0   mechanism; never the password)
    12   FeatureLevelRecord              0         0
    14   ClientQuotaRecord               0         0  (sets or removes one quota key of an
                                                       entity: user, client-id or both; ip)
    15   ProducerIdsRecord               0         0
    17   BrokerRegistrationChangeRecord  0-2       2  (v1: InControlledShutdown tag 1, v2:
                                                       LogDirs tag 2)
    18   AccessControlEntryRecord        0         0  (an ACL, by its id)
    19   RemoveAccessControlEntryRecord  0         0
    20   NoOpRecord                      0         0
    23   BeginTransactionRecord          0         0  (KIP-868: the records up to the
    24   EndTransactionRecord            0         0   End are applied together; an Abort
    25   AbortTransactionRecord          0         0   discards them; metadata/transactions.py)
"""

from __future__ import annotations

from dataclasses import dataclass

from gregor.protocol.schema.dsl import Message, parse_message


@dataclass(frozen=True, slots=True)
class RecordSchema:
    api_key: int
    name: str
    write_version: int
    message: Message


def _record(api_key: int, name: str, versions: str, write: int, text: str) -> RecordSchema:
    message = parse_message(name, versions, "0+", text)
    message.api_key = api_key
    message.kind = "metadata"
    return RecordSchema(api_key, name, write, message)


REGISTER_BROKER = _record(
    0,
    "RegisterBrokerRecord",
    "0-3",
    3,
    """
broker_id: int32
is_migrating_zk_broker: bool versions 2+ default false
incarnation_id: uuid   # the broker process's incarnation
broker_epoch: int64    # the offset of this record, assigned by the controller
end_points: []BrokerEndpoint
  name: string        # the listener name
  host: string
  port: uint16
  security_protocol: int16
features: []BrokerFeature
  name: string
  min_supported_version: int16
  max_supported_version: int16
rack: string nullable
fenced: bool default true
in_controlled_shutdown: bool versions 1+ default false
log_dirs: []uuid versions 3+ tag 0
""",
)

UNREGISTER_BROKER = _record(
    1,
    "UnregisterBrokerRecord",
    "0",
    0,
    """
broker_id: int32
broker_epoch: int64
""",
)

TOPIC = _record(
    2,
    "TopicRecord",
    "0",
    0,
    """
name: string
topic_id: uuid
""",
)

PARTITION = _record(
    3,
    "PartitionRecord",
    "0-2",
    1,
    """
partition_id: int32 default -1
topic_id: uuid
replicas: []int32           # preferred order: the first is the preferred leader
isr: []int32
removing_replicas: []int32
adding_replicas: []int32
leader: int32 default -1    # -1: no leader
leader_recovery_state: int8 tag 0 default 0   # 1: recovering from an unclean election
leader_epoch: int32 default -1
partition_epoch: int32 default -1
directories: []uuid versions 1+   # the log directory of each replica, as replicas
eligible_leader_replicas: []int32 versions 2+ nullable tag 1 default null
last_known_elr: []int32 versions 2+ nullable tag 2 default null
""",
)

CONFIG = _record(
    4,
    "ConfigRecord",
    "0",
    0,
    """
resource_type: int8    # 2 TOPIC, 4 BROKER (name "" for the cluster default)
resource_name: string
name: string
value: string nullable  # null: the config is deleted
""",
)

PARTITION_CHANGE = _record(
    5,
    "PartitionChangeRecord",
    "0-2",
    1,
    """
partition_id: int32 default -1
topic_id: uuid
isr: []int32 nullable tag 0 default null                # null: unchanged
leader: int32 tag 1 default -2                          # -2: unchanged, -1: no leader
replicas: []int32 nullable tag 2 default null
removing_replicas: []int32 nullable tag 3 default null
adding_replicas: []int32 nullable tag 4 default null
leader_recovery_state: int8 tag 5 default -1            # -1: unchanged
directories: []uuid versions 1+ nullable tag 8 default null
eligible_leader_replicas: []int32 versions 2+ nullable tag 6 default null
last_known_elr: []int32 versions 2+ nullable tag 7 default null
""",
)

FENCE_BROKER = _record(
    7,
    "FenceBrokerRecord",
    "0",
    0,
    """
id: int32
epoch: int64
""",
)

UNFENCE_BROKER = _record(
    8,
    "UnfenceBrokerRecord",
    "0",
    0,
    """
id: int32
epoch: int64
""",
)

REMOVE_TOPIC = _record(
    9,
    "RemoveTopicRecord",
    "0",
    0,
    """
topic_id: uuid
""",
)

FEATURE_LEVEL = _record(
    12,
    "FeatureLevelRecord",
    "0",
    0,
    """
name: string
feature_level: int16
""",
)

PRODUCER_IDS = _record(
    15,
    "ProducerIdsRecord",
    "0",
    0,
    """
broker_id: int32
broker_epoch: int64 default -1
next_producer_id: int64   # the first id of the next block
""",
)

BROKER_REGISTRATION_CHANGE = _record(
    17,
    "BrokerRegistrationChangeRecord",
    "0-2",
    2,
    """
broker_id: int32
broker_epoch: int64
fenced: int8 tag 0                          # -1 unfenced, 0 no change, 1 fenced
in_controlled_shutdown: int8 versions 1+ tag 1   # 0 no change, 1 in controlled shutdown
log_dirs: []uuid versions 2+ tag 2
""",
)

NO_OP = _record(20, "NoOpRecord", "0", 0, "")

USER_SCRAM_CREDENTIAL = _record(
    11,
    "UserScramCredentialRecord",
    "0",
    0,
    """
name: string         # the user name
mechanism: int8      # 1 SCRAM-SHA-256, 2 SCRAM-SHA-512
salt: bytes
stored_key: bytes
server_key: bytes
iterations: int32
""",
)

REMOVE_USER_SCRAM_CREDENTIAL = _record(
    22,
    "RemoveUserScramCredentialRecord",
    "0",
    0,
    """
name: string
mechanism: int8
""",
)

# -- client quotas ------------------------------------------------------------------------------

CLIENT_QUOTA = _record(
    14,
    "ClientQuotaRecord",
    "0",
    0,
    """
entity: []EntityData
  entity_type: string           # user, client-id or ip
  entity_name: string nullable  # null: the default entity of that type
key: string                     # producer_byte_rate, consumer_byte_rate, ...
value: float64                  # ignored when remove is set
remove: bool
""",
)

# -- end of client quotas -------------------------------------------------------------------------

BEGIN_TRANSACTION = _record(
    23,
    "BeginTransactionRecord",
    "0",
    0,
    """
name: string nullable tag 0 default null     # what the transaction does, for people
""",
)

END_TRANSACTION = _record(24, "EndTransactionRecord", "0", 0, "")

ABORT_TRANSACTION = _record(
    25,
    "AbortTransactionRecord",
    "0",
    0,
    """
reason: string nullable tag 0 default null   # why it was aborted, for people
""",
)

# -- ACLs (the authorizer's; gregor/security/acls.py has the codes) ----------------------------

ACCESS_CONTROL_ENTRY = _record(
    18,
    "AccessControlEntryRecord",
    "0",
    0,
    """
id: uuid
resource_type: int8
resource_name: string
pattern_type: int8
principal: string
host: string
operation: int8
permission_type: int8
""",
)

REMOVE_ACCESS_CONTROL_ENTRY = _record(
    19,
    "RemoveAccessControlEntryRecord",
    "0",
    0,
    """
id: uuid
""",
)

ACL_RECORDS: tuple[RecordSchema, ...] = (ACCESS_CONTROL_ENTRY, REMOVE_ACCESS_CONTROL_ENTRY)

# -- end of ACLs ---------------------------------------------------------------------------------

ALL: tuple[RecordSchema, ...] = (
    REGISTER_BROKER,
    UNREGISTER_BROKER,
    TOPIC,
    PARTITION,
    CONFIG,
    PARTITION_CHANGE,
    FENCE_BROKER,
    UNFENCE_BROKER,
    REMOVE_TOPIC,
    FEATURE_LEVEL,
    PRODUCER_IDS,
    BROKER_REGISTRATION_CHANGE,
    NO_OP,
    USER_SCRAM_CREDENTIAL,
    REMOVE_USER_SCRAM_CREDENTIAL,
    CLIENT_QUOTA,
    BEGIN_TRANSACTION,
    END_TRANSACTION,
    ABORT_TRANSACTION,
    *ACL_RECORDS,
)
