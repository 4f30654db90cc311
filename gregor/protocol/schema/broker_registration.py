"""BrokerRegistration (key 62) v0-4: a broker registers with the active controller (KIP-631).

Controller listener only; flexible in every version. v1: is_migrating_zk_broker. v2: log_dirs
(KIP-858). v3: previous_broker_epoch (KIP-966). v4: as v3 (allows a feature's minimum supported
version to be 0, KAFKA-17011).
"""

from gregor.protocol.schema.dsl import api

BROKER_REGISTRATION = api(
    key=62,
    name="BrokerRegistration",
    versions="0-4",
    flexible="0+",
    request="""
broker_id: int32
cluster_id: string
incarnation_id: uuid
listeners: []Listener
  name: string
  host: string
  port: uint16
  security_protocol: int16
features: []Feature
  name: string
  min_supported_version: int16
  max_supported_version: int16
rack: string nullable
is_migrating_zk_broker: bool versions 1+ default false
log_dirs: []uuid versions 2+ ignorable
previous_broker_epoch: int64 versions 3+ default -1 ignorable
""",
    response="""
throttle_time_ms: int32
error_code: int16
broker_epoch: int64 default -1
""",
)
