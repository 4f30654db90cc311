"""DeleteTopics (key 20) v1-6: delete topics by name (or, from v6, by id).

v1: throttle_time_ms. v2-3: as v1. v4: flexible. v5: error_message, THROTTLING_QUOTA_EXCEEDED
(KIP-599). v6: topics by name or id (KIP-516), replacing topic_names. v0 was removed in Kafka
4.0 (KIP-896).
"""

from gregor.protocol.schema.dsl import api

DELETE_TOPICS = api(
    key=20,
    name="DeleteTopics",
    versions="1-6",
    flexible="4+",
    request="""
topics: []DeleteTopicState versions 6+
  name: string nullable default null
  topic_id: uuid
topic_names: []string versions 0-5 ignorable
timeout_ms: int32
""",
    response="""
throttle_time_ms: int32 versions 1+ ignorable
responses: []DeletableTopicResult
  name: string nullable 6+
  topic_id: uuid versions 6+ ignorable
  error_code: int16
  error_message: string versions 5+ nullable default null ignorable
""",
)
