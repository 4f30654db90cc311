"""The two Kafka APIs confluent-kafka does not expose, asked with our own codec over one
blocking socket: DescribeQuorum (the metadata quorum's leader and each voter's lag) and
DescribeLogDirs (partition sizes), over TLS and SASL as the console's client settings say
(security/client_properties.py: librdkafka's names).
"""

from __future__ import annotations

import itertools
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gregor.protocol import api_keys, codec, errors
from gregor.protocol.messages import (
    ApiVersionsRequest,
    DescribeLogDirsRequest,
    DescribeQuorumRequest,
)
from gregor.security.client_properties import authenticate, connect_args

CLIENT_ID = "gregor-console"
METADATA_TOPIC = "__cluster_metadata"


class WireError(Exception):
    """A broker that could not be asked, or answered with an error: one readable line."""


def _call(address: str, api_key: int, body: Any, timeout_s: float, props: Mapping[str, Any]) -> Any:
    """`body` sent to `address` at the newest version both sides speak, and its answer;
    `props`: the client settings (TLS and SASL)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        secured = connect_args(props)()
        sock = socket.create_connection((host, int(port)), timeout=timeout_s)
    except (OSError, ValueError) as exc:
        raise WireError(f"cannot reach {address}: {exc}") from None
    correlation = itertools.count(1)

    def call(key: int, version: int, request: Any) -> Any:
        return _exchange(sock, key, version, next(correlation), request)

    try:
        if secured["ssl_context"] is not None:
            sock = secured["ssl_context"].wrap_socket(sock, server_hostname=host)
        if "sasl" in secured:
            authenticate(call, *secured["sasl"])
        versions = call(api_keys.API_VERSIONS, 0, ApiVersionsRequest())
        ours = api_keys.BY_KEY[api_key]
        theirs = next((a for a in versions.api_keys if a.api_key == api_key), None)
        if theirs is None or theirs.max_version < ours.min_version:
            raise WireError(f"{address} does not serve {ours.name}")
        return call(api_key, min(theirs.max_version, ours.max_version), body)
    except OSError as exc:  # PermissionError (a refused login) and ssl.SSLError among them
        raise WireError(f"{address}: {exc}") from None
    finally:
        sock.close()


def _exchange(sock: socket.socket, key: int, version: int, correlation: int, body: Any) -> Any:
    frame = codec.encode_request(key, version, correlation, CLIENT_ID, body)
    sock.sendall(b"".join(bytes(b) for b in frame))
    (size,) = struct.unpack(">i", _exact(sock, 4))
    got, answer = codec.decode_response(key, version, _exact(sock, size))
    if got != correlation:
        raise WireError(f"answer {got} to request {correlation}")
    return answer


def _exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise WireError("the broker closed the connection")
        out += chunk
    return bytes(out)


@dataclass(frozen=True)
class Voter:
    node: int
    role: str  # Leader, Follower or Observer
    log_end_offset: int
    lag: int | None


@dataclass(frozen=True)
class Quorum:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    replicas: list[Voter]


def describe_quorum(address: str, timeout_s: float, props: Mapping[str, Any]) -> Quorum:
    """The metadata quorum as `address` (any broker, or a controller) describes it."""
    topic = DescribeQuorumRequest.TopicData(
        topic_name=METADATA_TOPIC,
        partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)],
    )
    request = DescribeQuorumRequest(topics=[topic])
    answer = _call(address, api_keys.DESCRIBE_QUORUM, request, timeout_s, props)
    if answer.error_code != errors.NONE:
        raise WireError(f"DescribeQuorum: {errors.name_of(answer.error_code)}")
    if not answer.topics or not answer.topics[0].partitions:
        raise WireError("DescribeQuorum: the answer names no partition")
    part = answer.topics[0].partitions[0]
    if part.error_code != errors.NONE:
        raise WireError(f"DescribeQuorum: {errors.name_of(part.error_code)}")
    leader = next((v for v in part.current_voters if v.replica_id == part.leader_id), None)
    leader_end = leader.log_end_offset if leader is not None else part.high_watermark
    voters = sorted(
        part.current_voters, key=lambda v: (v.replica_id != part.leader_id, v.replica_id)
    )
    replicas = []
    for group, observer in ((voters, False), (part.observers, True)):
        for v in group:
            role = "Observer" if observer else "Follower"
            if v.replica_id == part.leader_id:
                role = "Leader"
            lag = leader_end - v.log_end_offset if v.log_end_offset >= 0 else None
            replicas.append(Voter(v.replica_id, role, v.log_end_offset, lag))
    return Quorum(part.leader_id, part.leader_epoch, part.high_watermark, replicas)


def partition_sizes(
    address: str, timeout_s: float, props: Mapping[str, Any]
) -> dict[tuple[str, int], int]:
    """The size in bytes of every partition replica on the broker at `address` (the current
    replica, not a future one being moved between its dirs)."""
    request = DescribeLogDirsRequest(topics=None)
    answer = _call(address, api_keys.DESCRIBE_LOG_DIRS, request, timeout_s, props)
    if getattr(answer, "error_code", errors.NONE) != errors.NONE:
        raise WireError(f"DescribeLogDirs: {errors.name_of(answer.error_code)}")
    sizes: dict[tuple[str, int], int] = {}
    for d in answer.results:
        for t in d.topics:
            for p in t.partitions:
                if not p.is_future_key:
                    sizes[(t.name, p.partition_index)] = p.partition_size
    return sizes
