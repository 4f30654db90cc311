"""DeleteRecords (key 21) v0-2: move partitions' log start offsets forward.

v1: as v0. v2: flexible. An offset of -1 means the high watermark.
"""

from gregor.protocol.schema.dsl import api

DELETE_RECORDS = api(
    key=21,
    name="DeleteRecords",
    versions="0-2",
    flexible="2+",
    request="""
topics: []DeleteRecordsTopic
  name: string
  partitions: []DeleteRecordsPartition
    partition_index: int32
    offset: int64   # delete before this offset; -1: the high watermark
timeout_ms: int32
""",
    response="""
throttle_time_ms: int32
topics: []DeleteRecordsTopicResult
  name: string
  partitions: []DeleteRecordsPartitionResult
    partition_index: int32
    low_watermark: int64
    error_code: int16
""",
)
