"""DescribeCluster (key 60) v0-2: cluster id, controller and brokers (KIP-700). Always flexible.

v1: endpoint_type, 1 brokers or 2 controllers (KIP-919). v2: include_fenced_brokers in, is_fenced
per broker out (KIP-1073, Kafka 4.0): registered but fenced brokers listed too when asked.
"""

from gregor.protocol.schema.dsl import api

DESCRIBE_CLUSTER = api(
    key=60,
    name="DescribeCluster",
    versions="0-2",
    flexible="0+",
    request="""
include_cluster_authorized_operations: bool
endpoint_type: int8 versions 1+ default 1
include_fenced_brokers: bool versions 2+
""",
    response="""
throttle_time_ms: int32
error_code: int16
error_message: string nullable default null
endpoint_type: int8 versions 1+ default 1
cluster_id: string
controller_id: int32 default -1
brokers: []DescribeClusterBroker
  broker_id: int32
  host: string
  port: int32
  rack: string nullable default null
  is_fenced: bool versions 2+
cluster_authorized_operations: int32 default -2147483648
""",
)
