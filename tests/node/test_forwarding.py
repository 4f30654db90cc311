"""Forwarding to the active controller, sans I/O (node/forwarding.py), on a clock the test
moves: the client's request in an Envelope, sent again 50 ms after NOT_CONTROLLER or no answer
until its deadline, the controller's response handed back unchanged, None when this node must
answer itself, and auto-creation with one CreateTopics in flight per topic."""

from __future__ import annotations

from typing import Any

from gregor.controller.admin import TopicSpec
from gregor.node.forwarding import ForwardingCore
from gregor.protocol import api_keys, codec, errors
from gregor.protocol.errors import BY_NAME
from gregor.protocol.messages import CreateTopicsResponse, EnvelopeResponse
from gregor.protocol.outbound import Outbound
from gregor.runtime.controller_channel import NoControllerError

NOT_CONTROLLER = BY_NAME["NOT_CONTROLLER"].code
FRAME = b"\x00\x13\x00\x07client request bytes"
FORWARDED = frozenset({api_keys.CREATE_TOPICS, api_keys.DESCRIBE_QUORUM})


class Setup:
    def __init__(self) -> None:
        self.active = False
        self.core = ForwardingCore(
            FORWARDED, is_active=lambda: self.active, node_name="broker-2", host="10.0.0.2"
        )
        self.woken = 0
        self.core.wakeup = self.wake
        self.answers: list[list[Any] | None] = []

    def wake(self) -> None:
        self.woken += 1

    def poll(self, now: int) -> tuple[list[Outbound], int | None]:
        result = self.core.poll(now)
        return result.outbound, result.next_deadline_ms


def envelope_answer(data: bytes | None, code: int = errors.NONE) -> EnvelopeResponse:
    return EnvelopeResponse(error_code=code, response_data=data)


def test_wanted_for_controller_requests_while_another_node_leads() -> None:
    s = Setup()
    assert s.core.wanted(api_keys.CREATE_TOPICS)
    assert not s.core.wanted(api_keys.PRODUCE)
    s.active = True
    assert not s.core.wanted(api_keys.CREATE_TOPICS)


def test_the_request_goes_in_an_envelope_and_the_answer_comes_back_unchanged() -> None:
    s = Setup()
    s.core.forward(FRAME, "192.168.1.9:51000", 5000, 1000, s.answers.append)
    assert s.woken == 1
    [out], deadline = s.poll(1000)
    assert deadline is None
    assert (out.api_key, out.version, out.destination) == (api_keys.ENVELOPE, 0, None)
    assert out.body.request_data == FRAME
    assert out.body.client_host_address == bytes([192, 168, 1, 9])
    assert out.timeout_ms == 5000
    assert s.poll(1001) == ([], None), "one send at a time per request"
    s.core.on_response(out, envelope_answer(b"response bytes"), 1200)
    assert s.answers == [[(14).to_bytes(4, "big"), b"response bytes"]]
    assert s.core.pending == []


def test_not_controller_and_no_answer_are_retried_until_the_deadline() -> None:
    s = Setup()
    s.core.forward(FRAME, "[::1]:4000", 1000, 0, s.answers.append)
    [out], _ = s.poll(0)
    assert len(out.body.client_host_address) == 16
    s.core.on_response(out, envelope_answer(None, NOT_CONTROLLER), 100)
    assert s.poll(120) == ([], 150)
    [out], _ = s.poll(150)
    assert out.timeout_ms == 850, "the time left"
    s.core.on_error(out, NoControllerError("no active controller known"), 150)
    [out], _ = s.poll(200)
    s.core.on_error(out, TimeoutError("no answer"), 1000)
    assert s.answers == []
    assert s.poll(1050) == ([], None)
    assert s.answers == [None] and s.core.pending == []


def test_a_refused_envelope_or_this_node_leading_now_is_answered_here() -> None:
    s = Setup()
    s.core.forward(FRAME, "x", 5000, 0, s.answers.append)
    [out], _ = s.poll(0)
    s.core.on_response(out, envelope_answer(None, BY_NAME["INVALID_REQUEST"].code), 10)
    assert s.answers == [None]
    s.core.forward(FRAME, "x", 5000, 20, s.answers.append)
    s.active = True
    assert s.poll(20) == ([], None)
    assert s.answers == [None, None]


def test_stopping_answers_what_waits_with_none() -> None:
    s = Setup()
    s.core.forward(FRAME, "x", 5000, 0, s.answers.append)
    s.core.give_up()
    assert s.answers == [None] and s.poll(1) == ([], None)


def test_auto_creation_sends_one_create_topics_per_topic_at_a_time() -> None:
    s = Setup()
    s.core.create_topic(TopicSpec("orders", 3, 2, configs={"cleanup.policy": "compact"}), 0)
    s.core.create_topic(TopicSpec("orders"), 1)
    [out], _ = s.poll(1)
    assert s.poll(2) == ([], None), "one CreateTopics in flight for the topic"
    header, request = codec.decode_request(memoryview(out.body.request_data))
    assert (header.request_api_key, header.request_api_version) == (api_keys.CREATE_TOPICS, 7)
    assert header.client_id == "broker-2-auto-create"
    [topic] = request.topics
    assert (topic.name, topic.num_partitions, topic.replication_factor) == ("orders", 3, 2)
    assert [(c.name, c.value) for c in topic.configs] == [("cleanup.policy", "compact")]
    assert out.body.client_host_address == bytes([10, 0, 0, 2])
    response = CreateTopicsResponse(
        topics=[CreateTopicsResponse.CreatableTopicResult(name="orders", error_code=0)]
    )
    frame = codec.join(
        codec.encode_response(api_keys.CREATE_TOPICS, 7, header.correlation_id, response)
    )[4:]
    s.core.on_response(out, envelope_answer(frame), 10)
    assert s.core.creating == set()
    s.core.create_topic(TopicSpec("orders"), 11)  # may be asked again (it exists now)
    assert len(s.poll(11)[0]) == 1
