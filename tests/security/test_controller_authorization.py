"""The controller listener's CLUSTER_ACTION refusals, without I/O: which APIs need what, and
each refusal shaped as Kafka's getErrorResponse (a Fetch before v13 names every partition)."""

from __future__ import annotations

import pytest

from gregor.broker.controller_authorization import (
    CLUSTER_AUTHORIZATION_FAILED,
    REQUIRED,
    refused,
)
from gregor.protocol import api_keys, codec
from gregor.protocol.messages import FetchRequest
from gregor.security.acls import CLUSTER_ACTION, DESCRIBE

pytestmark = pytest.mark.unit


def test_what_each_api_needs() -> None:
    assert REQUIRED[api_keys.DESCRIBE_QUORUM] == DESCRIBE
    for key in (api_keys.ALTER_PARTITION, api_keys.VOTE, api_keys.FETCH, api_keys.ENVELOPE):
        assert REQUIRED[key] == CLUSTER_ACTION
    assert api_keys.CREATE_TOPICS not in REQUIRED  # its handler checks what it needs


@pytest.mark.parametrize("key", sorted(REQUIRED))
def test_every_refusal_encodes_with_its_top_level_error(key: int) -> None:
    version = api_keys.BY_KEY[key].max_version
    body = refused(key, version, codec.message_class(key, "request")())
    assert body.error_code == CLUSTER_AUTHORIZATION_FAILED
    frame = b"".join(bytes(b) for b in codec.encode_response(key, version, 7, body))
    _, decoded = codec.decode_response(key, version, frame[4:])
    assert decoded.error_code == CLUSTER_AUTHORIZATION_FAILED


@pytest.mark.parametrize(("version", "partitions"), [(11, [0, 1]), (13, [])])
def test_a_fetch_before_v13_names_each_partition(version: int, partitions: list[int]) -> None:
    topic = FetchRequest.FetchTopic(
        topic="t", partitions=[FetchRequest.FetchPartition(partition=p) for p in (0, 1)]
    )
    body = refused(api_keys.FETCH, version, FetchRequest(topics=[topic]))
    named = [p.partition_index for t in body.responses for p in t.partitions]
    assert named == partitions
    assert all(
        p.error_code == CLUSTER_AUTHORIZATION_FAILED for t in body.responses for p in t.partitions
    )
