"""Which partitions a broker hosts (replication/hosting.py), over a one-node broker built in
process (not listening): new partitions come in steps while serving, all at once before, and a
partition no topic names any more is removed with its files."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from gregor.broker.broker import BrokerServer
from gregor.broker.config import BrokerConfig
from gregor.controller.admin import TopicSpec


def broker(tmp_path: Path) -> BrokerServer:
    config = BrokerConfig.load(None, {"log.dirs": str(tmp_path / "logs")})
    b = BrokerServer(config)
    b.logs.startup()
    return b


def test_partitions_are_created_in_steps_while_serving(tmp_path: Path) -> None:
    b = broker(tmp_path)
    hosting = b.hosting
    hosting.step = 100
    scheduled: list[Callable[[], None]] = []
    hosting.schedule = scheduled.append
    applied: list[int] = []
    hosting.on_applied.append(lambda now, _changed: applied.append(now))
    reconfigured: list[bool] = []  # every topic resolved again: broker configs may have changed
    hosting.on_broker_config = lambda: reconfigured.append(True)
    b.admin.create_topic(TopicSpec("big", 250, 1))
    hosting.apply()
    assert len(b.replicas.partitions) == 100 and len(scheduled) == 1
    scheduled.pop()()  # the next turn of the loop
    assert len(b.replicas.partitions) == 200 and len(scheduled) == 1
    scheduled.pop()()
    assert len(b.replicas.partitions) == 250 and not scheduled
    assert all(p.is_leader for p in b.replicas.partitions.values())
    assert len(applied) == 3
    assert reconfigured == [True], "only the first call looked at every topic"
    b.logs.shutdown()


def test_before_serving_everything_at_once_and_deleted_topics_go(tmp_path: Path) -> None:
    b = broker(tmp_path)
    b.admin.create_topic(TopicSpec("big", 250, 1))
    b.admin.create_topic(TopicSpec("small", 2, 1))
    b.hosting.apply()
    assert len(b.replicas.partitions) == 252
    small = tmp_path / "logs" / "small-1"
    assert small.is_dir()
    b.admin.delete_topic("small")
    b.hosting.apply()
    assert len(b.replicas.partitions) == 250 and b.replicas.get("small", 1) is None
    b.logs.purge_deleted(2**62)
    assert not small.exists()
    b.logs.shutdown()


def test_nothing_is_hosted_until_ready(tmp_path: Path) -> None:
    b = broker(tmp_path)
    b.hosting.ready = False  # a quorum member before its logs are open
    b.admin.create_topic(TopicSpec("t", 3, 1))
    b.hosting.apply()
    assert not b.replicas.partitions
    b.hosting.ready = True
    b.hosting.apply()
    assert len(b.replicas.partitions) == 3
    b.logs.shutdown()


def test_in_a_quorum_nothing_is_hosted_before_the_broker_has_registered(tmp_path: Path) -> None:
    """Back from a crash, the replayed metadata may still name this broker leader in its old
    epoch: it takes up partitions only once registered and caught up to its registration, then
    follows the metadata whatever its registration does."""
    b = broker(tmp_path)
    answers = [False, True, False]
    b.hosting.registered = lambda: answers.pop(0)
    b.admin.create_topic(TopicSpec("t", 3, 1))
    b.hosting.apply()
    assert not b.replicas.partitions
    b.hosting.apply()
    assert len(b.replicas.partitions) == 3 and b.hosting.registered is None
    b.admin.create_topic(TopicSpec("u", 1, 1))
    b.hosting.apply()  # not asked again
    assert len(b.replicas.partitions) == 4 and answers == [False]
    b.logs.shutdown()


def test_new_partitions_logs_are_made_on_a_worker_thread_then_hosted(tmp_path: Path) -> None:
    """With `in_thread` (a quorum member serving), a new partition's directory and files are
    made by the job handed there; it is hosted by the apply that follows, over that log."""
    b = broker(tmp_path)
    hosting = b.hosting
    scheduled: list[Callable[[], None]] = []
    hosting.schedule = scheduled.append
    hosting.on_broker_config = lambda: None  # (the broker's reconfigures its cleaner on a loop)
    jobs: list[tuple[Callable[[], object], Callable[[object], None]]] = []
    hosting.in_thread = lambda work, done: jobs.append((work, done))
    b.admin.create_topic(TopicSpec("t", 3, 1))
    hosting.apply()
    assert not b.replicas.partitions and len(jobs) == 1
    assert not (tmp_path / "logs" / "t-0").exists()  # nothing made on the caller's thread
    hosting.apply()
    assert len(jobs) == 1, "a partition being made is not asked for twice"
    work, done = jobs.pop()
    made: list[object] = []
    worker = threading.Thread(target=lambda: made.append(work()))
    worker.start()
    worker.join()
    assert (tmp_path / "logs" / "t-0").is_dir()
    done(made[0])
    assert scheduled, "placing the logs asks for another apply"
    scheduled.pop()()
    assert sorted(b.replicas.partitions) == [("t", 0), ("t", 1), ("t", 2)]
    assert all(p.is_leader for p in b.replicas.partitions.values())
    assert all(b.replicas.get("t", i).log is b.logs.get("t", i) for i in range(3))  # type: ignore[union-attr]
    b.logs.shutdown()


def test_a_partition_made_for_a_topic_deleted_meanwhile_is_removed(tmp_path: Path) -> None:
    b = broker(tmp_path)
    hosting = b.hosting
    scheduled: list[Callable[[], None]] = []
    hosting.schedule = scheduled.append
    hosting.on_broker_config = lambda: None  # (the broker's reconfigures its cleaner on a loop)
    jobs: list[tuple[Callable[[], object], Callable[[object], None]]] = []
    hosting.in_thread = lambda work, done: jobs.append((work, done))
    b.admin.create_topic(TopicSpec("gone", 1, 1))
    hosting.apply()
    b.admin.delete_topic("gone")
    hosting.apply()
    work, done = jobs.pop()
    done(work())
    scheduled.pop()()
    assert b.replicas.get("gone", 0) is None and b.logs.get("gone", 0) is None
    b.logs.shutdown()


def test_apply_soon_applies_once_at_the_next_turn(tmp_path: Path) -> None:
    b = broker(tmp_path)
    scheduled: list[Callable[[], None]] = []
    b.hosting.schedule = scheduled.append
    b.hosting.on_broker_config = lambda: None
    b.admin.create_topic(TopicSpec("t", 2, 1))
    b.hosting.apply_soon()
    b.hosting.apply_soon()
    assert len(scheduled) == 1 and not b.replicas.partitions
    scheduled.pop()()
    assert len(b.replicas.partitions) == 2
    b.logs.shutdown()


def test_a_change_that_moves_a_partition_away_drops_it_without_looking_at_every_topic(
    tmp_path: Path,
) -> None:
    b = broker(tmp_path)
    b.admin.create_topic(TopicSpec("a", 2, 1))
    b.admin.create_topic(TopicSpec("b", 2, 1))
    b.hosting.apply()
    assert len(b.replicas.partitions) == 4
    b.admin.delete_topic("b")
    b.admin.create_topic(TopicSpec("b", 1, 1))  # the same name, fewer partitions
    b.hosting.apply()
    assert sorted(b.replicas.partitions) == [("a", 0), ("a", 1), ("b", 0)]
    assert b.logs.get("b", 1) is None
    b.logs.shutdown()


Job = tuple[Callable[[], object], Callable[[object], None]]


def run_job(jobs: list[Job]) -> None:
    """The oldest job handed to the worker: its work on a thread, its answer on this one."""
    work, done = jobs.pop(0)
    made: list[object] = []
    worker = threading.Thread(target=lambda: made.append(work()))
    worker.start()
    worker.join()
    done(made[0])


def serving(b: BrokerServer, step: int) -> tuple[list[Callable[[], None]], list[Job]]:
    """The hosting as a serving broker's: (its scheduled applies, its worker's jobs)."""
    hosting = b.hosting
    hosting.step = step
    scheduled: list[Callable[[], None]] = []
    hosting.schedule = scheduled.append
    hosting.on_broker_config = lambda: None
    jobs: list[Job] = []
    hosting.in_thread = lambda work, done: jobs.append((work, done))
    return scheduled, jobs


def test_made_logs_are_placed_in_steps_and_a_waiter_is_told_once_all_are(tmp_path: Path) -> None:
    b = broker(tmp_path)
    scheduled, jobs = serving(b, step=4)
    b.admin.create_topic(TopicSpec("t", 10, 1))
    b.admin.create_topic(TopicSpec("other", 1, 1))
    b.hosting.apply()  # as a handler does, before asking
    told: list[str] = []
    assert not b.hosting.when_hosted(["t"], lambda: told.append("t"))
    assert len(jobs) == 1 and not b.replicas.partitions
    run_job(jobs)
    assert not b.logs.logs, "made logs are placed as their partitions are hosted, not at once"
    steps = 0
    while scheduled:
        scheduled.pop()()
        steps += 1
        assert len(b.replicas.partitions) == min(4 * steps, 11)
        assert told == ([] if len(b.replicas.partitions) < 11 else ["t"])
    assert steps == 3 and told == ["t"] and not jobs
    assert b.hosting.when_hosted(["t", "other"], lambda: told.append("again"))
    assert told == ["t"]
    b.logs.shutdown()


def test_one_job_at_a_time_and_what_is_asked_meanwhile_makes_the_next(tmp_path: Path) -> None:
    b = broker(tmp_path)
    scheduled, jobs = serving(b, step=100)
    b.admin.create_topic(TopicSpec("a", 2, 1))
    b.hosting.apply()
    b.admin.create_topic(TopicSpec("b", 3, 1))
    b.hosting.apply()
    assert len(jobs) == 1, "b's logs wait for the job under way"
    run_job(jobs)
    scheduled.pop()()
    assert sorted(b.replicas.partitions) == [("a", 0), ("a", 1)]
    assert len(jobs) == 1, "one job for every log asked for meanwhile"
    run_job(jobs)
    scheduled.pop()()
    assert len(b.replicas.partitions) == 5 and not jobs and not scheduled
    b.logs.shutdown()


def test_a_made_log_whose_topic_went_meanwhile_is_deleted_not_hosted(tmp_path: Path) -> None:
    b = broker(tmp_path)
    scheduled, jobs = serving(b, step=100)
    b.admin.create_topic(TopicSpec("gone", 2, 1))
    b.hosting.apply()
    run_job(jobs)  # made, not yet placed
    b.admin.delete_topic("gone")
    b.hosting.apply()
    while scheduled:
        scheduled.pop()()
    assert not b.replicas.partitions and not b.logs.logs
    b.logs.purge_deleted(2**62)
    assert not [p for p in (tmp_path / "logs").iterdir() if p.name.startswith("gone")]
    b.logs.shutdown()


def test_a_topic_with_no_partition_here_has_its_configs_left_unresolved(tmp_path: Path) -> None:
    """Configs are resolved for the topics with a partition hosted here, and only for them (a
    topic placed on other brokers costs a look at its replicas)."""
    b = broker(tmp_path)
    b.admin.create_topic(TopicSpec("here", 2, 1, configs={"retention.ms": "1234"}))
    b.admin.create_topic(TopicSpec("far", 2, 1))
    b.store.topics["far"].replicas = [[b.node_id + 1]] * 2  # as if placed on another broker
    resolved: list[str] = []
    log_config_for = b.hosting.config.log_config_for
    b.hosting.config.log_config_for = lambda t: resolved.append(t) or log_config_for(t)  # type: ignore[method-assign]
    b.hosting.apply()
    assert resolved == ["here"]
    assert sorted(b.replicas.partitions) == [("here", 0), ("here", 1)]
    assert all(p.log.config.retention_ms == 1234 for p in b.replicas.partitions.values())
    b.logs.shutdown()
