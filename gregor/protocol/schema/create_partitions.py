"""CreatePartitions (key 37) v0-3: add partitions to existing topics.

v1: as v0. v2: flexible. v3: THROTTLING_QUOTA_EXCEEDED (KIP-599).
"""

from gregor.protocol.schema.dsl import api

CREATE_PARTITIONS = api(
    key=37,
    name="CreatePartitions",
    versions="0-3",
    flexible="2+",
    request="""
topics: []CreatePartitionsTopic
  name: string
  count: int32   # the new total partition count
  assignments: []CreatePartitionsAssignment nullable   # null: the broker assigns
    broker_ids: []int32
timeout_ms: int32
validate_only: bool
""",
    response="""
throttle_time_ms: int32
results: []CreatePartitionsTopicResult
  name: string
  error_code: int16
  error_message: string nullable default null
""",
)
