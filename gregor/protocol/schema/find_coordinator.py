"""FindCoordinator (key 10) v0-6: which broker coordinates a group or a transactional id.

v1: key_type (0 group, 1 transaction), throttle_time_ms, error_message. v2: as v1. v3:
flexible. v4: batched: coordinator_keys in, one coordinator per key out (KIP-699). v5:
TRANSACTION_ABORTABLE may be returned (KIP-890). v6: key_type 2 share group (KIP-932).
"""

from gregor.protocol.schema.dsl import api

FIND_COORDINATOR = api(
    key=10,
    name="FindCoordinator",
    versions="0-6",
    flexible="3+",
    request="""
key: string versions 0-3
key_type: int8 versions 1+ default 0   # 0 group, 1 transaction, 2 share
coordinator_keys: []string versions 4+
""",
    response="""
throttle_time_ms: int32 versions 1+ ignorable
error_code: int16 versions 0-3
error_message: string versions 1-3 nullable ignorable
node_id: int32 versions 0-3
host: string versions 0-3
port: int32 versions 0-3
coordinators: []Coordinator versions 4+
  key: string
  node_id: int32
  host: string
  port: int32
  error_code: int16
  error_message: string nullable ignorable
""",
)
