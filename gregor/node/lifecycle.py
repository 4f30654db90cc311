"""A broker's life toward the active controller, sans I/O (Kafka's BrokerLifecycleManager and
RPCProducerIdManager): registration, heartbeats, fencing itself on the way out, a failed log
dir's deadline, and producer-id blocks fetched ahead.

    core = BrokerLifecycleCore(config, store, controller_id=channel.controller_id,
                               advertised=lambda: endpoints, offline_dirs=..., on_fatal=...)
    result = core.poll(now_ms)              # a registration, heartbeat or AllocateProducerIds
    core.on_response(out, answer, now_ms)   # or core.on_error(out, exc, now_ms)
    core.on_leader_change()                 # the controller moved: talk to the new one at once
    for out in core.leave_requests(controlled_shutdown=True): ...   # sent one after another

Registration and heartbeats, one request at a time: once the metadata is caught up (the
committed prefix is known) and a controller is known, register; then heartbeat every
`broker.heartbeat.interval.ms` with the offset replayed so far. Waits after each answer:

    registered                              at once (the first heartbeat)
    registration refused                    100 ms if NOT_CONTROLLER, else 1 s (a restarted
                                            broker is refused DUPLICATE_BROKER_REGISTRATION
                                            until its old session expires, as in Kafka)
    heartbeat: STALE_BROKER_EPOCH or        register again, at once
      BROKER_ID_NOT_REGISTERED
    heartbeat: another error                100 ms
    heartbeat: still fenced                 200 ms
    heartbeat: unfenced                     broker.heartbeat.interval.ms
    no answer                               200 ms
    no controller, metadata not caught up   100 ms

A leader change or a failed log dir brings the next one forward to now, unless one is out.

A failed log dir (KIP-858): every heartbeat names the broker's offline dirs by directory id;
if no controller has acknowledged one such heartbeat within `log.dir.failure.timeout.ms` of
the failure, `on_fatal` is called (the driver shuts the broker down, as Kafka does).

Leaving (`leave_requests`): a heartbeat with want_shut_down (controlled shutdown, unless
disabled), then one with want_fence; no more heartbeats after (one would unfence it). Each
needs a registered broker and a known controller; the sequence stops where one is missing.

Producer ids: once registered, one block (PRODUCER_ID_BLOCK_SIZE ids) is kept fetched ahead;
taking it (`allocate_producer_ids`) fetches the next. With none at hand the answer is
COORDINATOR_LOAD_IN_PROGRESS (the producer retries). A failed fetch is retried after 200 ms.
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gregor.controller.quorum_controller import PRODUCER_ID_BLOCK_SIZE
from gregor.metadata.image import METADATA_VERSION, Endpoint
from gregor.protocol import api_keys, errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.messages import (
    AllocateProducerIdsRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
)
from gregor.protocol.outbound import Outbound, Poll, earliest

log = logging.getLogger("gregor.cluster")

REGISTRATION_VERSION = 3
HEARTBEAT_VERSION = 1
LEAVE_TIMEOUT_MS = 1000
_code = errors.BY_NAME
NOT_CONTROLLER = _code["NOT_CONTROLLER"].code
RE_REGISTER = {_code["STALE_BROKER_EPOCH"].code, _code["BROKER_ID_NOT_REGISTERED"].code}
WAIT_NO_CONTROLLER_MS = 100
WAIT_AFTER_ERROR_MS = 100
WAIT_AFTER_REFUSAL_MS = 1000
WAIT_NO_ANSWER_MS = 200
WAIT_FENCED_MS = 200
PRODUCER_IDS_RETRY_MS = 200


@dataclass(frozen=True)
class LifecycleConfig:
    node_id: int
    heartbeat_interval_ms: int  # broker.heartbeat.interval.ms
    dir_failure_timeout_ms: int  # log.dir.failure.timeout.ms
    rack: str | None = None  # broker.rack
    log_dir_ids: tuple[uuid.UUID, ...] = ()
    incarnation_id: uuid.UUID = uuid.UUID(int=0)


class MetadataProgress(Protocol):
    """How far this node's metadata log is (the RaftMetadataStore)."""

    @property
    def cluster_id(self) -> str: ...

    @property
    def applied(self) -> int: ...

    @property
    def caught_up(self) -> bool: ...


def _noop() -> None:
    pass


class BrokerLifecycleCore:
    def __init__(
        self,
        config: LifecycleConfig,
        metadata: MetadataProgress,
        *,
        controller_id: Callable[[], int | None],
        advertised: Callable[[], Sequence[Endpoint]],
        offline_dirs: Callable[[], Mapping[str, uuid.UUID | None]],
        on_fatal: Callable[[str], None],
    ) -> None:
        """`advertised`: every client listener, as registered (name, host, port, security
        protocol id); `offline_dirs`: the failed log dirs, each with its directory id;
        `on_fatal`: shut this broker down (the reason)."""
        self.config = config
        self.node_id = config.node_id
        self.metadata = metadata
        self.controller_id = controller_id
        self.advertised = advertised
        self.offline_dirs = offline_dirs
        self.on_fatal = on_fatal
        self.broker_epoch = -1
        self.left = False  # leaving the cluster: no more heartbeats
        self.beat_in_flight = False  # a registration or heartbeat out
        self.next_beat_ms = 0
        self.dirs_failed_at_ms: int | None = None  # None once a controller knows
        self.pid_blocks: deque[int] = deque()  # first ids of blocks fetched ahead
        self.pid_in_flight = False
        self.next_pid_ms = 0
        self.wakeup: Callable[[], None] = _noop  # set by the driver

    # -- inputs ------------------------------------------------------------------------------

    def on_leader_change(self) -> None:
        """The controller moved: the next registration or heartbeat goes at once."""
        if not self.beat_in_flight:
            self.next_beat_ms = 0
        self.wakeup()

    def on_dir_failure(self, now_ms: int) -> None:
        """A log dir went offline: tell the controller with the next heartbeat, now."""
        if self.dirs_failed_at_ms is None:
            self.dirs_failed_at_ms = now_ms
        self.on_leader_change()

    def allocate_producer_ids(self, count: int) -> int:
        """The first id of a block of `count` (PRODUCER_ID_BLOCK_SIZE) fetched ahead."""
        if count != PRODUCER_ID_BLOCK_SIZE:
            raise ValueError(f"producer id blocks are {PRODUCER_ID_BLOCK_SIZE} ids, not {count}")
        self.wakeup()  # fetch the next one
        if not self.pid_blocks:
            raise KafkaError(
                _code["COORDINATOR_LOAD_IN_PROGRESS"].code,
                "no producer id block from the controller yet",
            )
        return self.pid_blocks.popleft()

    # -- what to send ------------------------------------------------------------------------

    def poll(self, now_ms: int) -> Poll:
        out: list[Outbound] = []
        deadline = None
        if not self.left:
            deadline = self._check_dir_failure_timeout(now_ms)
            if not self.beat_in_flight:
                beat = self._beat(now_ms) if now_ms >= self.next_beat_ms else None
                if beat is None:
                    deadline = earliest(deadline, self.next_beat_ms)
                else:
                    out.append(beat)
        pids = self._producer_ids(now_ms)
        if pids is not None:
            out.append(pids)
        elif not self.pid_blocks and not self.pid_in_flight and self.broker_epoch >= 0:
            deadline = earliest(deadline, self.next_pid_ms)
        return Poll(out, deadline)

    def _check_dir_failure_timeout(self, now_ms: int) -> int | None:
        """Shut down if the controller has not learned of the failed dirs in time; else the
        time to check again."""
        failed_at = self.dirs_failed_at_ms
        if failed_at is None:
            return None
        if now_ms - failed_at <= self.config.dir_failure_timeout_ms:
            return failed_at + self.config.dir_failure_timeout_ms + 1
        self.dirs_failed_at_ms = None
        self.on_fatal(
            f"broker {self.node_id}: no controller learned of its offline log dirs "
            f"({', '.join(self.offline_dirs())}) within log.dir.failure.timeout.ms"
        )
        return None

    def _beat(self, now_ms: int) -> Outbound | None:
        """The registration or heartbeat due now; None (and when to look again) if none can go."""
        controller = self.controller_id()
        if controller is None or not self.metadata.caught_up:
            self.next_beat_ms = now_ms + WAIT_NO_CONTROLLER_MS
            return None
        self.beat_in_flight = True
        if self.broker_epoch < 0:
            return Outbound(
                api_keys.BROKER_REGISTRATION,
                REGISTRATION_VERSION,
                self._registration(),
                context=controller,
            )
        request = BrokerHeartbeatRequest(
            broker_id=self.node_id,
            broker_epoch=self.broker_epoch,
            current_metadata_offset=self.metadata.applied,
            want_fence=False,
            want_shut_down=False,
            offline_log_dirs=[d for d in self.offline_dirs().values() if d is not None],
        )
        return Outbound(api_keys.BROKER_HEARTBEAT, HEARTBEAT_VERSION, request)

    def _registration(self) -> BrokerRegistrationRequest:
        R = BrokerRegistrationRequest
        return R(
            broker_id=self.node_id,
            cluster_id=self.metadata.cluster_id,
            incarnation_id=self.config.incarnation_id,
            listeners=[
                R.Listener(
                    name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol
                )
                for e in self.advertised()
            ],
            features=[
                R.Feature(name=METADATA_VERSION, min_supported_version=1, max_supported_version=25)
            ],
            rack=self.config.rack,
            log_dirs=list(self.config.log_dir_ids),
        )

    def _producer_ids(self, now_ms: int) -> Outbound | None:
        if self.pid_blocks or self.pid_in_flight or self.broker_epoch < 0:
            return None
        if now_ms < self.next_pid_ms:
            return None
        self.pid_in_flight = True
        request = AllocateProducerIdsRequest(broker_id=self.node_id, broker_epoch=self.broker_epoch)
        return Outbound(api_keys.ALLOCATE_PRODUCER_IDS, 0, request)

    # -- answers -----------------------------------------------------------------------------

    def on_response(self, out: Outbound, answer: Any, now_ms: int) -> None:
        if out.api_key == api_keys.ALLOCATE_PRODUCER_IDS:
            self.pid_in_flight = False
            if answer.error_code != errors.NONE or answer.producer_id_len != PRODUCER_ID_BLOCK_SIZE:
                self.next_pid_ms = now_ms + PRODUCER_IDS_RETRY_MS
            else:
                self.pid_blocks.append(answer.producer_id_start)
        elif out.context == "leave":
            self._on_leave_answer(out, answer.error_code)
        elif out.api_key == api_keys.BROKER_REGISTRATION:
            self.beat_in_flight = False
            self._on_registration(out.context, answer, now_ms)
        else:
            self.beat_in_flight = False
            self._on_heartbeat(out.body, answer, now_ms)

    def on_error(self, out: Outbound, error: Exception, now_ms: int) -> None:
        if out.api_key == api_keys.ALLOCATE_PRODUCER_IDS:
            self.pid_in_flight = False
            self.next_pid_ms = now_ms + PRODUCER_IDS_RETRY_MS
        elif out.context == "leave":
            log.info("broker %d not %s: %s", self.node_id, _leave_step(out.body), error)
        else:
            self.beat_in_flight = False
            log.debug("broker %d lifecycle: %s", self.node_id, error)
            self.next_beat_ms = now_ms + WAIT_NO_ANSWER_MS

    def _on_registration(self, controller: int, answer: Any, now_ms: int) -> None:
        if answer.error_code != errors.NONE:
            log.info("broker %d: registration with node %d refused: %s",
                     self.node_id, controller, errors.name_of(answer.error_code))  # fmt: skip
            not_controller = answer.error_code == NOT_CONTROLLER
            wait = WAIT_NO_CONTROLLER_MS if not_controller else WAIT_AFTER_REFUSAL_MS
            self.next_beat_ms = now_ms + wait
            return
        self.broker_epoch = answer.broker_epoch
        log.info("broker %d registered with controller %d (epoch %d)",
                 self.node_id, controller, self.broker_epoch)  # fmt: skip
        self.next_beat_ms = now_ms

    def _on_heartbeat(self, request: Any, answer: Any, now_ms: int) -> None:
        if answer.error_code in RE_REGISTER:
            log.info("broker %d: %s: registering again",
                     self.node_id, errors.name_of(answer.error_code))  # fmt: skip
            self.broker_epoch = -1
            self.next_beat_ms = now_ms
            return
        if answer.error_code != errors.NONE:
            self.next_beat_ms = now_ms + WAIT_AFTER_ERROR_MS
            return
        if request.offline_log_dirs and self.dirs_failed_at_ms is not None:
            self.dirs_failed_at_ms = None
            log.info("broker %d: the controller knows its log dirs %s are offline",
                     self.node_id, ", ".join(self.offline_dirs()))  # fmt: skip
        wait = WAIT_FENCED_MS if answer.is_fenced else self.config.heartbeat_interval_ms
        self.next_beat_ms = now_ms + wait

    # -- leaving -----------------------------------------------------------------------------

    def leave_requests(self, controlled_shutdown: bool) -> Iterator[Outbound]:
        """The heartbeats that hand this broker's leaderships over (controlled shutdown), then
        fence it, to send one after another; nothing the second time. Each is made when the
        previous is answered, and only with a registered broker and a known controller."""
        if self.left:
            return
        self.left = True
        steps = [(True, False)] if controlled_shutdown else []
        steps.append((False, True))
        for want_shut_down, want_fence in steps:
            if self.broker_epoch < 0 or self.controller_id() is None:
                return
            request = BrokerHeartbeatRequest(
                broker_id=self.node_id,
                broker_epoch=self.broker_epoch,
                current_metadata_offset=self.metadata.applied,
                want_fence=want_fence,
                want_shut_down=want_shut_down,
            )
            yield Outbound(
                api_keys.BROKER_HEARTBEAT,
                HEARTBEAT_VERSION,
                request,
                timeout_ms=LEAVE_TIMEOUT_MS,
                context="leave",
            )

    def _on_leave_answer(self, out: Outbound, error_code: int) -> None:
        if error_code == errors.NONE:
            log.info("broker %d %s", self.node_id, _leave_step(out.body))


def _leave_step(request: Any) -> str:
    if request.want_fence:
        return "fenced for shutdown"
    return "handed its leaderships over (controlled shutdown)"
