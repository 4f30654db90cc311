"""Our declarations of every API we serve: one module per API, each an `api(...)` call.

Each module opens with the API's versions and what changed in each, then declares the request
and response fields in the language described in `dsl.py`. `APIS` maps the API key to its
parsed declaration; `codec` generates classes and codecs from it.
"""

from __future__ import annotations

from gregor.protocol.schema.add_offsets_to_txn import ADD_OFFSETS_TO_TXN
from gregor.protocol.schema.add_partitions_to_txn import ADD_PARTITIONS_TO_TXN
from gregor.protocol.schema.allocate_producer_ids import ALLOCATE_PRODUCER_IDS
from gregor.protocol.schema.alter_client_quotas import ALTER_CLIENT_QUOTAS
from gregor.protocol.schema.alter_configs import ALTER_CONFIGS
from gregor.protocol.schema.alter_partition import ALTER_PARTITION
from gregor.protocol.schema.alter_user_scram_credentials import ALTER_USER_SCRAM_CREDENTIALS
from gregor.protocol.schema.api_versions import API_VERSIONS
from gregor.protocol.schema.begin_quorum_epoch import BEGIN_QUORUM_EPOCH
from gregor.protocol.schema.broker_heartbeat import BROKER_HEARTBEAT
from gregor.protocol.schema.broker_registration import BROKER_REGISTRATION
from gregor.protocol.schema.create_acls import CREATE_ACLS
from gregor.protocol.schema.create_partitions import CREATE_PARTITIONS
from gregor.protocol.schema.create_topics import CREATE_TOPICS
from gregor.protocol.schema.delete_acls import DELETE_ACLS
from gregor.protocol.schema.delete_groups import DELETE_GROUPS
from gregor.protocol.schema.delete_records import DELETE_RECORDS
from gregor.protocol.schema.delete_topics import DELETE_TOPICS
from gregor.protocol.schema.describe_acls import DESCRIBE_ACLS
from gregor.protocol.schema.describe_client_quotas import DESCRIBE_CLIENT_QUOTAS
from gregor.protocol.schema.describe_cluster import DESCRIBE_CLUSTER
from gregor.protocol.schema.describe_configs import DESCRIBE_CONFIGS
from gregor.protocol.schema.describe_groups import DESCRIBE_GROUPS
from gregor.protocol.schema.describe_log_dirs import DESCRIBE_LOG_DIRS
from gregor.protocol.schema.describe_producers import DESCRIBE_PRODUCERS
from gregor.protocol.schema.describe_quorum import DESCRIBE_QUORUM
from gregor.protocol.schema.describe_topic_partitions import DESCRIBE_TOPIC_PARTITIONS
from gregor.protocol.schema.describe_transactions import DESCRIBE_TRANSACTIONS
from gregor.protocol.schema.describe_user_scram_credentials import DESCRIBE_USER_SCRAM_CREDENTIALS
from gregor.protocol.schema.dsl import Api
from gregor.protocol.schema.elect_leaders import ELECT_LEADERS
from gregor.protocol.schema.end_quorum_epoch import END_QUORUM_EPOCH
from gregor.protocol.schema.end_txn import END_TXN
from gregor.protocol.schema.envelope import ENVELOPE
from gregor.protocol.schema.fetch import FETCH
from gregor.protocol.schema.fetch_snapshot import FETCH_SNAPSHOT
from gregor.protocol.schema.find_coordinator import FIND_COORDINATOR
from gregor.protocol.schema.heartbeat import HEARTBEAT
from gregor.protocol.schema.incremental_alter_configs import INCREMENTAL_ALTER_CONFIGS
from gregor.protocol.schema.init_producer_id import INIT_PRODUCER_ID
from gregor.protocol.schema.join_group import JOIN_GROUP
from gregor.protocol.schema.leave_group import LEAVE_GROUP
from gregor.protocol.schema.list_groups import LIST_GROUPS
from gregor.protocol.schema.list_offsets import LIST_OFFSETS
from gregor.protocol.schema.list_transactions import LIST_TRANSACTIONS
from gregor.protocol.schema.metadata import METADATA
from gregor.protocol.schema.offset_commit import OFFSET_COMMIT
from gregor.protocol.schema.offset_delete import OFFSET_DELETE
from gregor.protocol.schema.offset_fetch import OFFSET_FETCH
from gregor.protocol.schema.offset_for_leader_epoch import OFFSET_FOR_LEADER_EPOCH
from gregor.protocol.schema.produce import PRODUCE
from gregor.protocol.schema.sasl_authenticate import SASL_AUTHENTICATE
from gregor.protocol.schema.sasl_handshake import SASL_HANDSHAKE
from gregor.protocol.schema.sync_group import SYNC_GROUP
from gregor.protocol.schema.txn_offset_commit import TXN_OFFSET_COMMIT
from gregor.protocol.schema.vote import VOTE
from gregor.protocol.schema.write_txn_markers import WRITE_TXN_MARKERS

ALL: tuple[Api, ...] = (
    # 1. The data path.
    API_VERSIONS,
    METADATA,
    PRODUCE,
    FETCH,
    LIST_OFFSETS,
    # 2. Admin.
    CREATE_TOPICS,
    DELETE_TOPICS,
    CREATE_PARTITIONS,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
    DESCRIBE_CLUSTER,
    DELETE_RECORDS,
    DESCRIBE_LOG_DIRS,
    OFFSET_FOR_LEADER_EPOCH,
    DESCRIBE_TOPIC_PARTITIONS,
    ELECT_LEADERS,
    DESCRIBE_USER_SCRAM_CREDENTIALS,
    ALTER_USER_SCRAM_CREDENTIALS,
    DESCRIBE_CLIENT_QUOTAS,
    ALTER_CLIENT_QUOTAS,
    # 3. Consumer groups.
    FIND_COORDINATOR,
    JOIN_GROUP,
    SYNC_GROUP,
    HEARTBEAT,
    LEAVE_GROUP,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    DESCRIBE_GROUPS,
    LIST_GROUPS,
    DELETE_GROUPS,
    OFFSET_DELETE,
    # 4. Transactions.
    INIT_PRODUCER_ID,
    ADD_PARTITIONS_TO_TXN,
    ADD_OFFSETS_TO_TXN,
    END_TXN,
    TXN_OFFSET_COMMIT,
    WRITE_TXN_MARKERS,
    DESCRIBE_TRANSACTIONS,
    LIST_TRANSACTIONS,
    DESCRIBE_PRODUCERS,
    # 5. Authentication (no SASL listener yet: both answer ILLEGAL_SASL_STATE).
    SASL_HANDSHAKE,
    SASL_AUTHENTICATE,
    # 5b. Authorization: ACLs.
    DESCRIBE_ACLS,
    CREATE_ACLS,
    DELETE_ACLS,
    # 6. KRaft: the quorum (controller listener; DescribeQuorum also on brokers).
    VOTE,
    BEGIN_QUORUM_EPOCH,
    END_QUORUM_EPOCH,
    FETCH_SNAPSHOT,
    DESCRIBE_QUORUM,
    # 7. KRaft: brokers to the controller.
    BROKER_REGISTRATION,
    BROKER_HEARTBEAT,
    ALTER_PARTITION,
    ALLOCATE_PRODUCER_IDS,
    ENVELOPE,
)

APIS: dict[int, Api] = {a.key: a for a in ALL}
