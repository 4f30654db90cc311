"""A broker's lifecycle toward the controller, sans I/O (node/lifecycle.py), on a clock the test
moves: registration once the metadata is caught up and a controller is known, heartbeats at
their interval (faster while fenced), registering again when told, retries after refusals and
lost requests, a leader change bringing the next one forward, the failed-log-dir deadline,
leaving (controlled shutdown, then fenced), and producer-id blocks fetched ahead."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest

from gregor.controller.quorum_controller import PRODUCER_ID_BLOCK_SIZE
from gregor.metadata.image import Endpoint
from gregor.node.lifecycle import BrokerLifecycleCore, LifecycleConfig
from gregor.protocol import api_keys, errors
from gregor.protocol.errors import BY_NAME, KafkaError
from gregor.protocol.messages import (
    AllocateProducerIdsResponse,
    BrokerHeartbeatResponse,
    BrokerRegistrationResponse,
)
from gregor.protocol.outbound import Outbound
from gregor.runtime.client import DisconnectedError

INTERVAL = 2000
DIR_TIMEOUT = 30_000
DIR_ID = uuid.UUID(int=7)
code = {name: e.code for name, e in BY_NAME.items()}


@dataclass
class Metadata:
    cluster_id: str = "c1"
    applied: int = 41
    caught_up: bool = True


@dataclass
class Setup:
    metadata: Metadata = field(default_factory=Metadata)
    controller: int | None = 9
    offline: dict[str, uuid.UUID | None] = field(default_factory=dict)
    fatal: list[str] = field(default_factory=list)
    woken: int = 0

    def __post_init__(self) -> None:
        config = LifecycleConfig(
            node_id=4,
            heartbeat_interval_ms=INTERVAL,
            dir_failure_timeout_ms=DIR_TIMEOUT,
            rack="r1",
            log_dir_ids=(DIR_ID,),
            incarnation_id=uuid.UUID(int=1),
        )
        self.core = BrokerLifecycleCore(
            config,
            self.metadata,
            controller_id=lambda: self.controller,
            advertised=lambda: [
                Endpoint("PLAINTEXT", "10.0.0.4", 9092, 0),
                Endpoint("EXTERNAL", "public4", 19092, 3),
            ],
            offline_dirs=lambda: self.offline,
            on_fatal=self.fatal.append,
        )
        self.core.wakeup = self.wake

    def wake(self) -> None:
        self.woken += 1

    def poll(self, now: int) -> tuple[list[Outbound], int | None]:
        result = self.core.poll(now)
        return result.outbound, result.next_deadline_ms

    def beat(self, now: int) -> Outbound:
        """The one registration or heartbeat due at `now` (producer-id fetches aside)."""
        out, _ = self.poll(now)
        beats = [o for o in out if o.api_key != api_keys.ALLOCATE_PRODUCER_IDS]
        assert len(beats) == 1, out
        return beats[0]

    def register(self, now: int = 0, epoch: int = 50) -> None:
        out, _ = self.poll(now)
        assert [o.api_key for o in out] == [api_keys.BROKER_REGISTRATION]
        answer = BrokerRegistrationResponse(error_code=0, broker_epoch=epoch)
        self.core.on_response(out[0], answer, now)

    def heartbeat_answer(
        self, out: Outbound, now: int, fenced: bool = False, error: int = 0
    ) -> None:
        assert out.api_key == api_keys.BROKER_HEARTBEAT
        answer = BrokerHeartbeatResponse(error_code=error, is_fenced=fenced, is_caught_up=True)
        self.core.on_response(out, answer, now)


def test_registration_waits_for_caught_up_metadata_and_a_controller() -> None:
    s = Setup()
    s.metadata.caught_up = False
    assert s.poll(0) == ([], 100)
    s.metadata.caught_up = True
    s.controller = None
    assert s.poll(100) == ([], 200)
    s.controller = 9
    out = s.beat(200)
    assert (out.api_key, out.version) == (api_keys.BROKER_REGISTRATION, 3)
    body = out.body
    assert (body.broker_id, body.cluster_id, body.rack, body.log_dirs) == (4, "c1", "r1", [DIR_ID])
    assert [(li.name, li.host, li.port, li.security_protocol) for li in body.listeners] == [
        ("PLAINTEXT", "10.0.0.4", 9092, 0),
        ("EXTERNAL", "public4", 19092, 3),
    ]
    assert s.poll(201) == ([], None), "one registration out at a time"


@pytest.mark.parametrize(
    ("error", "wait"), [("NOT_CONTROLLER", 100), ("DUPLICATE_BROKER_REGISTRATION", 1000)]
)
def test_a_refused_registration_is_retried(error: str, wait: int) -> None:
    s = Setup()
    out = s.beat(0)
    s.core.on_response(out, BrokerRegistrationResponse(error_code=code[error], broker_epoch=-1), 5)
    assert s.core.broker_epoch == -1
    assert s.poll(5) == ([], 5 + wait)
    assert s.beat(5 + wait).api_key == api_keys.BROKER_REGISTRATION


def test_heartbeats_at_the_interval_faster_while_fenced() -> None:
    s = Setup()
    s.register(0)
    assert s.core.broker_epoch == 50
    first = s.beat(0)  # at once after registering
    body = first.body
    assert (body.broker_id, body.broker_epoch, body.current_metadata_offset) == (4, 50, 41)
    assert not body.want_fence and not body.want_shut_down and body.offline_log_dirs == []
    s.heartbeat_answer(first, 10, fenced=True)
    assert s.poll(10)[1] == 210
    s.heartbeat_answer(s.beat(210), 220, fenced=False)
    assert s.poll(221)[1] == 220 + INTERVAL
    assert s.beat(220 + INTERVAL).api_key == api_keys.BROKER_HEARTBEAT


def test_a_lost_heartbeat_is_retried_and_an_error_answer_too() -> None:
    s = Setup()
    s.register(0)
    s.core.on_error(s.beat(0), DisconnectedError("lost"), 10)
    assert s.poll(10)[1] == 210
    s.heartbeat_answer(s.beat(210), 215, error=code["REQUEST_TIMED_OUT"])
    assert s.poll(215)[1] == 315


@pytest.mark.parametrize("error", ["STALE_BROKER_EPOCH", "BROKER_ID_NOT_REGISTERED"])
def test_told_it_is_not_registered_it_registers_again_at_once(error: str) -> None:
    s = Setup()
    s.register(0)
    s.heartbeat_answer(s.beat(0), 10, error=code[error])
    assert s.core.broker_epoch == -1
    assert s.beat(10).api_key == api_keys.BROKER_REGISTRATION


def test_a_leader_change_brings_the_next_heartbeat_forward_unless_one_is_out() -> None:
    s = Setup()
    s.register(0)
    s.heartbeat_answer(s.beat(0), 10)
    s.core.on_leader_change()
    assert s.woken == 1
    out = s.beat(20)
    s.core.on_leader_change()  # while one is out: its answer sets the next time
    s.heartbeat_answer(out, 30)
    assert s.poll(40)[1] == 30 + INTERVAL


def test_offline_log_dirs_are_reported_and_unacknowledged_ones_shut_the_broker_down() -> None:
    s = Setup()
    s.register(0)
    s.heartbeat_answer(s.beat(0), 10)
    s.offline = {"/data/a": DIR_ID, "/data/b": None}
    s.core.on_dir_failure(1000)
    out = s.beat(1000)  # at once
    assert out.body.offline_log_dirs == [DIR_ID]
    s.core.on_error(out, DisconnectedError("controller down"), 1010)
    _, deadline = s.poll(1010)
    assert deadline == 1210  # the next heartbeat comes before the deadline check
    s.core.on_dir_failure(1500)  # another dir: the clock still runs from the first failure
    for _ in range(200):  # no controller answers until the timeout
        out_now, deadline = s.poll(deadline or 0)
        for o in out_now:
            s.core.on_error(o, DisconnectedError("controller down"), deadline or 0)
        if s.fatal:
            break
    assert deadline is not None
    assert len(s.fatal) == 1 and "/data/a, /data/b" in s.fatal[0]
    assert s.core.dirs_failed_at_ms is None


def test_an_acknowledged_dir_failure_does_not_shut_down() -> None:
    s = Setup()
    s.register(0)
    s.heartbeat_answer(s.beat(0), 10)
    s.offline = {"/data/a": DIR_ID}
    s.core.on_dir_failure(1000)
    s.heartbeat_answer(s.beat(1000), 1010)
    assert s.core.dirs_failed_at_ms is None
    now = 1010
    while now < 1000 + 2 * DIR_TIMEOUT:
        out, deadline = s.poll(now)
        for o in out:
            s.heartbeat_answer(o, now)
        now = deadline if deadline is not None and deadline > now else now + 1
    assert s.fatal == []


def test_the_dir_failure_deadline_is_one_past_the_timeout() -> None:
    s = Setup()
    s.core.on_dir_failure(1000)
    s.controller = None
    assert s.poll(1000 + DIR_TIMEOUT)[1] == 1000 + DIR_TIMEOUT + 1
    assert s.fatal == []
    s.poll(1000 + DIR_TIMEOUT + 1)
    assert len(s.fatal) == 1


@pytest.mark.parametrize("controlled", [True, False])
def test_leaving_hands_leaderships_over_then_fences_then_beats_no_more(controlled: bool) -> None:
    s = Setup()
    s.register(0)
    steps = list(s.core.leave_requests(controlled_shutdown=controlled))
    wanted = [(True, False), (False, True)] if controlled else [(False, True)]
    assert [(o.body.want_shut_down, o.body.want_fence) for o in steps] == wanted
    assert all(o.timeout_ms == 1000 and o.body.broker_epoch == 50 for o in steps)
    assert list(s.core.leave_requests(controlled_shutdown=controlled)) == [], "once"
    out, deadline = s.poll(10_000)
    assert [o.api_key for o in out] == [api_keys.ALLOCATE_PRODUCER_IDS] and deadline is None


def test_leaving_unregistered_or_with_no_controller_sends_nothing() -> None:
    s = Setup()
    assert list(s.core.leave_requests(True)) == []
    s = Setup()
    s.register(0)
    leaving = s.core.leave_requests(True)
    next(leaving)
    s.controller = None  # lost while the first step was out
    assert list(leaving) == []


def test_producer_id_blocks_are_fetched_ahead_once_registered() -> None:
    s = Setup()
    with pytest.raises(KafkaError) as info:
        s.core.allocate_producer_ids(PRODUCER_ID_BLOCK_SIZE)
    assert info.value.code == code["COORDINATOR_LOAD_IN_PROGRESS"]
    s.register(0)  # no producer-id fetch went out before
    [pids] = [o for o in s.poll(0)[0] if o.api_key == api_keys.ALLOCATE_PRODUCER_IDS]
    assert (pids.body.broker_id, pids.body.broker_epoch) == (4, 50)
    assert not [o for o in s.poll(1)[0] if o.api_key == api_keys.ALLOCATE_PRODUCER_IDS]
    s.core.on_error(pids, DisconnectedError("lost"), 5)
    assert s.poll(5) == ([], 205)  # the heartbeat went with the first fetch; the retry waits
    [retry] = [o for o in s.poll(205)[0] if o.api_key == api_keys.ALLOCATE_PRODUCER_IDS]
    block = AllocateProducerIdsResponse(
        error_code=errors.NONE, producer_id_start=3000, producer_id_len=PRODUCER_ID_BLOCK_SIZE
    )
    s.core.on_response(retry, block, 210)
    assert not [o for o in s.poll(211)[0] if o.api_key == api_keys.ALLOCATE_PRODUCER_IDS]
    woken = s.woken
    assert s.core.allocate_producer_ids(PRODUCER_ID_BLOCK_SIZE) == 3000
    assert s.woken == woken + 1
    assert [o for o in s.poll(212)[0] if o.api_key == api_keys.ALLOCATE_PRODUCER_IDS]
    with pytest.raises(ValueError):
        s.core.allocate_producer_ids(7)
