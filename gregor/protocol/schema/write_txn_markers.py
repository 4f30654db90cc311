"""WriteTxnMarkers (key 27) v1: the transaction coordinator asks partition leaders to write
commit or abort markers.

v1: flexible. v0 was removed in Kafka 4.0 (KIP-896); (v2, transaction_version, is Kafka 4.1's).
"""

from gregor.protocol.schema.dsl import api

WRITE_TXN_MARKERS = api(
    key=27,
    name="WriteTxnMarkers",
    versions="1",
    flexible="1+",
    request="""
markers: []WritableTxnMarker
  producer_id: int64
  producer_epoch: int16
  transaction_result: bool   # true: commit, false: abort
  topics: []WritableTxnMarkerTopic
    name: string
    partition_indexes: []int32
  coordinator_epoch: int32
""",
    response="""
markers: []WritableTxnMarkerResult
  producer_id: int64
  topics: []WritableTxnMarkerTopicResult
    name: string
    partitions: []WritableTxnMarkerPartitionResult
      partition_index: int32
      error_code: int16
""",
)
