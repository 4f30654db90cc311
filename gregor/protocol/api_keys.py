"""The APIs this broker serves, with the versions it accepts: the source of the ApiVersions answer.

Kept as data: one row per API, Kafka's key and name and our (min, max) version. The ranges are
Kafka 4.0's (versions removed by KIP-896 are not served); the schema for each API declares at
least these versions (a test checks it). A request whose key is not here, or whose version is
outside its row, is detected from the first four bytes of the header, before the body is
decoded (`codec.decode_request` raises `UnsupportedVersionError`).

A row here means the codec can read and write the API, not that a client listener serves it:
the KRaft rows (Vote ... AllocateProducerIds) are spoken between controllers and brokers, and
ApiVersions advertises only the rows with a registered handler (`handlers.registry.served`).

An ApiVersions request of a version above ours still gets an answer: the v0 response format
with UNSUPPORTED_VERSION and our table, so the client can retry with a version we know
(KIP-511); `codec.encode_api_versions_fallback` builds it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ApiKey:
    key: int
    name: str
    min_version: int
    max_version: int

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
SASL_HANDSHAKE = 17
API_VERSIONS = 18
CREATE_TOPICS = 19
DELETE_TOPICS = 20
DELETE_RECORDS = 21
INIT_PRODUCER_ID = 22
OFFSET_FOR_LEADER_EPOCH = 23
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
WRITE_TXN_MARKERS = 27
TXN_OFFSET_COMMIT = 28
DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
DESCRIBE_LOG_DIRS = 35
SASL_AUTHENTICATE = 36
CREATE_PARTITIONS = 37
DELETE_GROUPS = 42
ELECT_LEADERS = 43
INCREMENTAL_ALTER_CONFIGS = 44
OFFSET_DELETE = 47
DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49
DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51
VOTE = 52
BEGIN_QUORUM_EPOCH = 53
END_QUORUM_EPOCH = 54
DESCRIBE_QUORUM = 55
ALTER_PARTITION = 56
ENVELOPE = 58
FETCH_SNAPSHOT = 59
DESCRIBE_CLUSTER = 60
DESCRIBE_PRODUCERS = 61
BROKER_REGISTRATION = 62
BROKER_HEARTBEAT = 63
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
ALLOCATE_PRODUCER_IDS = 67
DESCRIBE_TOPIC_PARTITIONS = 75

SUPPORTED: tuple[ApiKey, ...] = (
    ApiKey(PRODUCE, "Produce", 3, 12),
    ApiKey(FETCH, "Fetch", 4, 17),
    ApiKey(LIST_OFFSETS, "ListOffsets", 1, 10),
    ApiKey(METADATA, "Metadata", 0, 13),
    ApiKey(OFFSET_COMMIT, "OffsetCommit", 2, 9),
    ApiKey(OFFSET_FETCH, "OffsetFetch", 1, 9),
    ApiKey(FIND_COORDINATOR, "FindCoordinator", 0, 6),
    ApiKey(JOIN_GROUP, "JoinGroup", 0, 9),
    ApiKey(HEARTBEAT, "Heartbeat", 0, 4),
    ApiKey(LEAVE_GROUP, "LeaveGroup", 0, 5),
    ApiKey(SYNC_GROUP, "SyncGroup", 0, 5),
    ApiKey(DESCRIBE_GROUPS, "DescribeGroups", 0, 6),
    ApiKey(LIST_GROUPS, "ListGroups", 0, 5),
    ApiKey(SASL_HANDSHAKE, "SaslHandshake", 0, 1),
    ApiKey(API_VERSIONS, "ApiVersions", 0, 4),
    ApiKey(CREATE_TOPICS, "CreateTopics", 2, 7),
    ApiKey(DELETE_TOPICS, "DeleteTopics", 1, 6),
    ApiKey(DELETE_RECORDS, "DeleteRecords", 0, 2),
    ApiKey(INIT_PRODUCER_ID, "InitProducerId", 0, 5),
    ApiKey(OFFSET_FOR_LEADER_EPOCH, "OffsetForLeaderEpoch", 2, 4),
    ApiKey(ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxn", 0, 5),
    ApiKey(ADD_OFFSETS_TO_TXN, "AddOffsetsToTxn", 0, 4),
    ApiKey(END_TXN, "EndTxn", 0, 5),
    ApiKey(WRITE_TXN_MARKERS, "WriteTxnMarkers", 1, 1),
    ApiKey(TXN_OFFSET_COMMIT, "TxnOffsetCommit", 0, 5),
    ApiKey(DESCRIBE_ACLS, "DescribeAcls", 1, 3),
    ApiKey(CREATE_ACLS, "CreateAcls", 1, 3),
    ApiKey(DELETE_ACLS, "DeleteAcls", 1, 3),
    ApiKey(DESCRIBE_CONFIGS, "DescribeConfigs", 1, 4),
    ApiKey(ALTER_CONFIGS, "AlterConfigs", 0, 2),
    ApiKey(DESCRIBE_LOG_DIRS, "DescribeLogDirs", 1, 4),
    ApiKey(SASL_AUTHENTICATE, "SaslAuthenticate", 0, 2),
    ApiKey(CREATE_PARTITIONS, "CreatePartitions", 0, 3),
    ApiKey(DELETE_GROUPS, "DeleteGroups", 0, 2),
    ApiKey(ELECT_LEADERS, "ElectLeaders", 0, 2),
    ApiKey(INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigs", 0, 1),
    ApiKey(OFFSET_DELETE, "OffsetDelete", 0, 0),
    ApiKey(DESCRIBE_CLIENT_QUOTAS, "DescribeClientQuotas", 0, 1),
    ApiKey(ALTER_CLIENT_QUOTAS, "AlterClientQuotas", 0, 1),
    ApiKey(DESCRIBE_USER_SCRAM_CREDENTIALS, "DescribeUserScramCredentials", 0, 0),
    ApiKey(ALTER_USER_SCRAM_CREDENTIALS, "AlterUserScramCredentials", 0, 0),
    ApiKey(VOTE, "Vote", 0, 2),
    ApiKey(BEGIN_QUORUM_EPOCH, "BeginQuorumEpoch", 0, 1),
    ApiKey(END_QUORUM_EPOCH, "EndQuorumEpoch", 0, 1),
    ApiKey(DESCRIBE_QUORUM, "DescribeQuorum", 0, 2),
    ApiKey(ALTER_PARTITION, "AlterPartition", 2, 3),
    ApiKey(ENVELOPE, "Envelope", 0, 0),
    ApiKey(FETCH_SNAPSHOT, "FetchSnapshot", 0, 1),
    ApiKey(DESCRIBE_CLUSTER, "DescribeCluster", 0, 2),
    ApiKey(DESCRIBE_PRODUCERS, "DescribeProducers", 0, 0),
    ApiKey(BROKER_REGISTRATION, "BrokerRegistration", 0, 4),
    ApiKey(BROKER_HEARTBEAT, "BrokerHeartbeat", 0, 1),
    ApiKey(DESCRIBE_TRANSACTIONS, "DescribeTransactions", 0, 0),
    ApiKey(LIST_TRANSACTIONS, "ListTransactions", 0, 1),
    ApiKey(ALLOCATE_PRODUCER_IDS, "AllocateProducerIds", 0, 0),
    ApiKey(DESCRIBE_TOPIC_PARTITIONS, "DescribeTopicPartitions", 0, 0),
)

BY_KEY: dict[int, ApiKey] = {a.key: a for a in SUPPORTED}
BY_NAME: dict[str, ApiKey] = {a.name: a for a in SUPPORTED}


def is_supported(api_key: int, api_version: int) -> bool:
    entry = BY_KEY.get(api_key)
    return entry is not None and entry.min_version <= api_version <= entry.max_version


def name_of(api_key: int) -> str:
    entry = BY_KEY.get(api_key)
    return entry.name if entry else f"UnknownApi{api_key}"
