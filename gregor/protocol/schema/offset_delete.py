"""OffsetDelete (key 47) v0: delete a group's committed offsets for some partitions (KIP-496).

Never flexible.
"""

from gregor.protocol.schema.dsl import api

OFFSET_DELETE = api(
    key=47,
    name="OffsetDelete",
    versions="0",
    flexible="none",
    request="""
group_id: string
topics: []OffsetDeleteRequestTopic
  name: string
  partitions: []OffsetDeleteRequestPartition
    partition_index: int32
""",
    response="""
error_code: int16
throttle_time_ms: int32 ignorable
topics: []OffsetDeleteResponseTopic
  name: string
  partitions: []OffsetDeleteResponsePartition
    partition_index: int32
    error_code: int16
""",
)
