"""Property: for every API, version and direction, decode(encode(x)) == x, and the records
fields come back as views of the input (zero-copy)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gregor.protocol import api_keys, codec
from gregor.protocol.headers import RequestHeader

from .strategies import all_cases, case_id, examples, message_strategy

CASES = all_cases()

_SETTINGS = settings(
    max_examples=examples(8),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
@_SETTINGS
@given(data=st.data())
def test_round_trip(case: tuple[int, str, int], data: st.DataObject) -> None:
    key, kind, version = case
    value = data.draw(message_strategy(key, kind, version, max_list=2))
    buffers = codec.encode_body(key, version, kind, value)
    raw = bytearray(codec.join(buffers))
    assert len(raw) == codec.total_length(buffers)
    decoded = codec.decode_body(key, version, kind, raw)
    assert decoded == value
    # Encoding what was decoded gives the same bytes.
    assert codec.join(codec.encode_body(key, version, kind, decoded)) == raw


SERVED = [c for c in CASES if api_keys.is_supported(c[0], c[2])]


@settings(max_examples=examples(200), deadline=None, suppress_health_check=list(HealthCheck))
@given(
    data=st.data(),
    case=st.sampled_from(SERVED),
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    client_id=st.one_of(st.none(), st.text(max_size=20)),
)
def test_whole_frames_round_trip(
    data: st.DataObject, case: tuple[int, str, int], correlation_id: int, client_id: str | None
) -> None:
    key, kind, version = case
    value = data.draw(message_strategy(key, kind, version, max_list=2))
    if kind == "request":
        if client_id is not None:
            client_id = client_id.encode("utf-8", "replace").decode("utf-8")  # no lone surrogates
        buffers = codec.encode_request(key, version, correlation_id, client_id, value)
        frame = bytearray(codec.join(buffers))
        assert int.from_bytes(frame[:4], "big") == len(frame) - 4
        header, body = codec.decode_request(frame[4:])
        assert header == RequestHeader(key, version, correlation_id, client_id)
        assert body == value
    else:
        buffers = codec.encode_response(key, version, correlation_id, value)
        frame = bytearray(codec.join(buffers))
        assert int.from_bytes(frame[:4], "big") == len(frame) - 4
        assert codec.decode_response(key, version, frame[4:]) == (correlation_id, value)
