"""DescribeLogDirs (key 35) v1-4: log directories and the size of each partition in them.

v1: as v0. v2: flexible. v3: a top-level error_code. v4: total_bytes and usable_bytes per
directory (KIP-827). v0 was removed in Kafka 4.0 (KIP-896).
"""

from gregor.protocol.schema.dsl import api

DESCRIBE_LOG_DIRS = api(
    key=35,
    name="DescribeLogDirs",
    versions="1-4",
    flexible="2+",
    request="""
topics: []DescribableLogDirTopic nullable   # null: every partition
  topic: string
  partitions: []int32
""",
    response="""
throttle_time_ms: int32
error_code: int16 versions 3+ ignorable
results: []DescribeLogDirsResult
  error_code: int16
  log_dir: string
  topics: []DescribeLogDirsTopic
    name: string
    partitions: []DescribeLogDirsPartition
      partition_index: int32
      partition_size: int64
      offset_lag: int64
      is_future_key: bool
  total_bytes: int64 versions 4+ default -1 ignorable
  usable_bytes: int64 versions 4+ default -1 ignorable
""",
)
