"""Which partitions this broker hosts: exactly those the metadata names it a replica of, each
with its topic's current configs, as leader or follower (ReplicaManager.apply), and nothing
else (a partition no topic names is removed, its files deleted).

    hosting = PartitionHosting(node_id, store, replicas, logs, config_view, clock)
    hosting.apply()         # after every metadata change; cheap when little changed

Configs are resolved again only for the topics changed since the last call (every topic the
first time, and after a dynamic broker config changed): resolving them is what costs. While
serving, at most `step` new partitions are hosted per call (becoming leader or follower over a
log made already: tens of microseconds each) and the rest are left to a call `schedule`d for
the next turn of the loop, so a topic of 10,000 partitions never holds every other request for
long.

A serving broker hands the making of new partitions' directories and files to a worker thread
(`in_thread`, set by the owner): the file system's metadata operations (mkdir, creating the
segment file) wait behind its journal's commits, often for milliseconds, and the loop should
not. One job at a time makes every log asked for meanwhile (one hand-off for many topics); the
logs it made are placed, each as its partition is hosted, by the `apply`s that follow. Nothing
is fsynced there: a new log's directory and leader-epoch checkpoint are fsynced by its first
flush, before its recovery point moves (log.py `creation_syncs`), as Kafka's LocalLog flushes
a new segment's directory with it; until then a crash (even a power loss) finds at most an
empty or missing log, whose epochs recovery takes from its batches again.

`when_hosted(topics, then)` tells when none of `topics` has a partition still to be hosted
here: a one-voter broker answers CreateTopics once its new partitions are (what its clients
saw when they were made inline), without holding the loop meanwhile.

In a quorum a broker takes up no partition before it has registered and caught up to its
registration (as Kafka's broker waits for its initial catch-up): back from a crash, the metadata
it replays may still name it leader in its old epoch, with an ISR change of its previous
incarnation in flight; leading again there would let it acknowledge writes a new leader never
gets. Its new registration makes the controller move those leaderships first.

The effects of a change go to callbacks the owner sets: follower changes to the replica
fetchers, `on_applied(now_ms, changed)` to the coordinators, `on_broker_config()` after a
dynamic broker config changed. `changed` names every topic whose records, or whose partitions'
hosting here, may have changed in this call (a partition whose log was made since counts); None
for "any" (the first call, a snapshot, a dynamic broker config, a topic deleted): a coordinator
whose topic is not named has nothing to look at. No I/O of its own beyond the log manager's, no
event loop, no clock reads.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Collection
from typing import Any, Protocol

from gregor.clock import Clock
from gregor.metadata.config_view import BrokerConfigView
from gregor.metadata.image import MetadataImage
from gregor.metadata.store import TopicInfo
from gregor.protocol.errors import KafkaError
from gregor.replication.partition import FollowerChange, ReplicaManager
from gregor.storage.config import LogConfig
from gregor.storage.log import Log
from gregor.storage.log_manager import LogManager

log = logging.getLogger("gregor.replication")

TopicPartition = tuple[str, int]

# New partitions hosted per call while serving (becoming leader over a made log: 15-90 us
# each on a busy 2-core machine), and new partitions' logs asked of the worker per call.
NEW_PARTITIONS_PER_STEP = 16
LOGS_ASKED_PER_STEP = 256


class TopicSource(Protocol):
    @property
    def caught_up(self) -> bool: ...

    @property
    def image(self) -> MetadataImage: ...

    @property
    def topics(self) -> dict[str, TopicInfo]: ...

    def take_changes(self) -> set[str] | None: ...


class PartitionHosting:
    def __init__(
        self,
        node_id: int,
        store: TopicSource,
        replicas: ReplicaManager,
        logs: LogManager,
        config: BrokerConfigView,
        clock: Clock,
        *,
        step: int = NEW_PARTITIONS_PER_STEP,
    ) -> None:
        self.node_id = node_id
        self.store = store
        self.replicas = replicas
        self.logs = logs
        self.config = config
        self.clock = clock
        self.step = step
        # Set by the owner: `ready` false holds every apply (a quorum member before its logs
        # are open); `schedule` set means serving: partitions are created in steps.
        self.ready = True
        # In a quorum, nothing is hosted before this says yes once (then it is not asked again):
        # the broker has registered and caught up to its registration (Kafka's initial catch-up).
        self.registered: Callable[[], bool] | None = None
        self.on_caught_up: Callable[[], None] | None = None  # called once, when it says yes
        self.schedule: Callable[[Callable[[], None]], object] | None = None
        self.on_followers: Callable[[list[FollowerChange]], None] | None = None
        self.on_applied: list[Callable[[int, Collection[str] | None], None]] = []
        self.on_broker_config: Callable[[], None] | None = None
        self._unhosted: set[str] = set()  # topics a previous call had no budget left for
        self._scheduled = False
        # The most partitions each topic name had here: the indexes a change may have to drop.
        self._widths: dict[str, int] = {}
        # Set by the owner: run the first function on a worker thread, then the second with its
        # result (or exception) back on this one. New partitions' logs are made there.
        self.in_thread: Callable[[Callable[[], Any], Callable[[Any], None]], object] | None = None
        # New partitions whose logs are asked for, being made, or made and not yet placed; by
        # topic, how many each has there.
        self._preparing: set[TopicPartition] = set()
        self._preparing_topics: Counter[str] = Counter()
        # (topic, partition, its configs, the leader epoch this broker leads it in, if it does)
        self._to_prepare: list[tuple[str, int, LogConfig, int | None]] = []
        self._job_running = False
        self._asked = 0  # logs asked of the worker by this apply
        # What the worker made, by partition: (its log dir, the log or the OSError making it)
        self._made: dict[TopicPartition, tuple[str, Log | BaseException]] = {}
        # (topics, what to call once none of them has a partition still to be hosted here)
        self._waiters: list[tuple[frozenset[str], Callable[[], None]]] = []
        # By topic, the partition a later step starts from (unchanged since: the ones before
        # are hosted or being made, and a made one lowers it), so steps over a topic of 10,000
        # partitions do not each walk it from the start.
        self._resume: dict[str, int] = {}

    def apply_soon(self) -> None:
        """`apply` at the next turn of the loop, once however often asked (at once when not
        serving). A quorum member's replay calls it: what the same commit woke first, the
        answers waiting for it and the next Fetch, goes out before partitions are created."""
        if self.schedule is None:
            self.apply()
        elif not self._scheduled:
            self._scheduled = True
            self.schedule(self.apply)

    def apply(self) -> None:
        self._scheduled = False
        if not self.store.caught_up or not self.ready:
            return
        if self.registered is not None:
            if not self.registered():
                return
            self.registered = None
            if self.on_caught_up is not None:
                self.on_caught_up()
        topics = self.store.topics
        from_store = self.store.take_changes()
        changed = None if from_store is None else from_store | self._unhosted
        if from_store is None:
            self._resume.clear()
        for name in from_store or ():
            self._resume.pop(name, None)  # looked at from its first partition again
        self._unhosted = set()
        todo = topics.values() if changed is None else [topics[n] for n in changed if n in topics]
        now = self.clock.now_ms()
        budget = self.step if self.schedule is not None else None
        self._asked = 0
        for info in todo:
            if budget is not None and (budget <= 0 or self._asked >= LOGS_ASKED_PER_STEP):
                self._unhosted.add(info.name)
                continue
            left = self._host_topic(info, self.store.image, now, budget)
            if left is not None and left < 0:
                self._unhosted.add(info.name)
            budget = left
        if self._to_prepare and not self._job_running:
            self._prepare_logs()
        if self._unhosted and not self._scheduled and self.schedule is not None:
            self._scheduled = True
            self.schedule(self.apply)
        if changed is None or any(name not in topics for name in changed):
            self._remove_unwanted(topics)  # everything, or a topic deleted: look at all
            changed = None
        elif from_store:
            self._remove_unwanted_of(topics, from_store)
        changes = self.replicas.take_follower_changes()
        if changes and self.on_followers is not None:
            self.on_followers(changes)
        for applied in self.on_applied:
            applied(now, changed)
        if changed is None and self.schedule is not None and self.on_broker_config is not None:
            self.on_broker_config()  # dynamic broker configs may have changed
        if self._waiters:
            self._wake_waiters()

    def when_hosted(self, topics: Collection[str], then: Callable[[], None]) -> bool:
        """True if none of `topics` has a partition still to be hosted here (their logs being
        made, or left to a later step); else False, and `then()` is called once none has."""
        if not self._busy(topics):
            return True
        self._waiters.append((frozenset(topics), then))
        return False

    def _busy(self, topics: Collection[str]) -> bool:
        return any(t in self._unhosted or t in self._preparing_topics for t in topics)

    def _wake_waiters(self) -> None:
        waiting, self._waiters = self._waiters, []
        for topics, then in waiting:
            if self._busy(topics):
                self._waiters.append((topics, then))
            else:
                then()

    def _remove_unwanted(self, topics: dict[str, TopicInfo]) -> None:
        wanted = {
            (info.name, index)
            for info in topics.values()
            for index, replicas in enumerate(info.replicas)
            if self.node_id in replicas
        }
        self._widths = {info.name: len(info.replicas) for info in topics.values()}
        for tp in list(self.replicas.partitions):
            if tp not in wanted:
                self.replicas.remove(*tp)
        for tp in [tp for tp in self._made if tp not in wanted]:
            self._drop_made(tp)
        for tp, _log in self.logs.partitions():
            if tp not in wanted:
                log.warning("deleting %s-%d: no topic in the metadata names it", *tp)
                self.logs.delete(*tp)

    def _remove_unwanted_of(self, topics: dict[str, TopicInfo], changed: set[str]) -> None:
        """`_remove_unwanted` for the partitions of the `changed` topics only (all exist): a
        reassignment may have moved one away, a topic deleted and created again under the same
        name may have fewer partitions. The cost then grows with the change, not the cluster."""
        for name in changed:
            info = topics[name]
            width = max(self._widths.get(name, 0), len(info.replicas))
            self._widths[name] = width
            for index in range(width):
                if index < len(info.replicas) and self.node_id in info.replicas[index]:
                    continue
                if (name, index) in self._made:
                    self._drop_made((name, index))
                if self.replicas.get(name, index) is not None:
                    self.replicas.remove(name, index)
                if (name, index) in self.logs.logs:
                    log.warning("deleting %s-%d: no topic in the metadata names it", name, index)
                    self.logs.delete(name, index)

    def _drop_made(self, tp: TopicPartition) -> None:
        """A log made for a partition no longer wanted here: placed, then deleted with its dir."""
        d, made = self._made.pop(tp)
        self._done_preparing(tp)
        self.logs.adopt(*tp, d, made)
        if self.logs.get(*tp) is made:
            self.logs.delete(*tp)

    def _done_preparing(self, tp: TopicPartition) -> None:
        self._preparing.discard(tp)
        left = self._preparing_topics[tp[0]] - 1
        if left > 0:
            self._preparing_topics[tp[0]] = left
        else:
            del self._preparing_topics[tp[0]]

    def _needs_log(self, topic: str, index: int, cfg: LogConfig, reg: Any) -> bool:
        """True while a new partition's log is asked of the worker thread or being made there;
        a log made there is placed now (False: host it). When `reg` names this broker leader,
        the log's leader-epoch checkpoint is made holding that epoch."""
        if self.in_thread is None or self.logs.get(topic, index) is not None:
            return False
        tp = (topic, index)
        made = self._made.pop(tp, None)
        if made is not None:
            self._done_preparing(tp)
            self.logs.adopt(topic, index, *made)
            if self.logs.get(topic, index) is not None:
                return False
            if not isinstance(made[1], OSError):  # not asked again before the next change
                log.error("cannot make the log of %s-%d: %r", topic, index, made[1])
                return True
            # its log dir failed: asked again, of another dir (none online: not hosted)
        if tp not in self._preparing:
            self._preparing.add(tp)
            self._preparing_topics[topic] += 1
            self._asked += 1
            first = reg.leader_epoch if reg.leader == self.node_id else None
            self._to_prepare.append((topic, index, cfg, first))
        return True

    def _prepare_logs(self) -> None:
        """Make the logs of `_to_prepare` in one job on the worker thread; they are placed by
        the applies that follow. One job at a time: what is asked meanwhile makes the next."""
        batch, self._to_prepare = self._to_prepare, []
        jobs = []
        for topic, index, cfg, first_epoch in batch:
            try:
                d, open_log = self.logs.prepare(topic, index, cfg, first_epoch)
            except KafkaError:  # every log dir offline: not hosted (said by the log manager)
                self._done_preparing((topic, index))
                continue
            jobs.append((topic, index, d, open_log))
        if not jobs:
            return

        def make() -> list[Log | BaseException]:
            """The logs, or the OSError making each (its log dir then goes offline)."""
            made: list[Log | BaseException] = []
            for _topic, _index, _d, open_log in jobs:
                try:
                    made.append(open_log())
                except OSError as exc:
                    made.append(exc)
            return made

        def made(result: list[Log | BaseException] | BaseException) -> None:
            self._job_running = False
            for i, (topic, index, d, _open) in enumerate(jobs):
                outcome = result if isinstance(result, BaseException) else result[i]
                self._made[(topic, index)] = (d, outcome)
                self._unhosted.add(topic)
                self._resume[topic] = min(self._resume.get(topic, index), index)
            self.apply_soon()

        assert self.in_thread is not None
        self._job_running = True
        self.in_thread(make, made)

    def _host_topic(
        self, info: TopicInfo, image: MetadataImage, now: int, budget: int | None
    ) -> int | None:
        """Apply one topic's partitions hosted here; the budget of new partitions left (None:
        no limit), negative when it ran out before the last of them."""
        topic_image = image.topic(info.name)
        if topic_image is None:
            return budget
        cfg: LogConfig | None = None  # resolved for the first partition hosted here (if any)
        min_isr = 0
        for index in range(self._resume.pop(info.name, 0), len(info.replicas)):
            reg = topic_image.partitions.get(index)
            if self.node_id not in info.replicas[index] or reg is None:
                continue
            if cfg is None:
                cfg = self.config.log_config_for(info.name)
                min_isr = self.config.min_insync_replicas(info)
            new = self.replicas.get(info.name, index) is None
            if new and budget is not None and (budget <= 0 or self._asked >= LOGS_ASKED_PER_STEP):
                self._resume[info.name] = index
                return -1
            if self._needs_log(info.name, index, cfg, reg):
                continue  # its log is being made on a worker thread: hosted once it is
            if new and budget is not None:
                budget -= 1
            try:
                self.replicas.apply(info.name, index, info.topic_id, reg, cfg, min_isr, now)
            except KafkaError as exc:  # its log dir failed (said once, by the log manager)
                log.debug("cannot host %s-%d: %s", info.name, index, exc)
        return budget
