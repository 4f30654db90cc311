"""AlterPartition (key 56) v2-3: a partition leader asks the controller to change the ISR.

Controller listener only; flexible in every version. v1: leader_recovery_state (KIP-704).
v2: topic ids replace topic names (KIP-841). v3: new_isr_with_epochs (broker id and epoch)
replaces new_isr (KIP-903). v0-1 were removed in Kafka 4.0 (KIP-896).
"""

from gregor.protocol.schema.dsl import api

ALTER_PARTITION = api(
    key=56,
    name="AlterPartition",
    versions="2-3",
    flexible="0+",
    request="""
broker_id: int32
broker_epoch: int64 default -1
topics: []TopicData
  topic_id: uuid ignorable
  partitions: []PartitionData
    partition_index: int32
    leader_epoch: int32
    new_isr: []int32 versions 0-2
    new_isr_with_epochs: []BrokerState versions 3+
      broker_id: int32
      broker_epoch: int64 default -1
    leader_recovery_state: int8 versions 1+ default 0   # 0 recovered, 1 recovering
    partition_epoch: int32
""",
    response="""
throttle_time_ms: int32
error_code: int16
topics: []TopicData
  topic_id: uuid ignorable
  partitions: []PartitionData
    partition_index: int32
    error_code: int16
    leader_id: int32
    leader_epoch: int32
    isr: []int32
    leader_recovery_state: int8 versions 1+ default 0 ignorable
    partition_epoch: int32
""",
)
