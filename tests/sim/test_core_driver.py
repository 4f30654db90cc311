"""The simulation's drivers of the broker's cores (sim/core_driver.py): a core is polled when
woken and at its deadline (on the host's clock, which may be jumped), once however often
woken; a sooner timer supersedes a later one; an answer goes to on_response, no answer or
NOT_CONTROLLER to on_error, then the core is polled again; the purgatory expires at its
deadline."""

from __future__ import annotations

from typing import Any

from gregor.protocol.outbound import Outbound, Poll
from gregor.replication.purgatory import DelayedOperation, DelayedOperationPurgatory
from gregor.sim.core_driver import NoAnswer, SimCoreDriver, SimPurgatoryDriver


class Host:
    """Simulated time `sim_now`; the host's clock runs `offset` ahead of it."""

    def __init__(self, offset: int = 0) -> None:
        self.incarnation = 1
        self.sim_now = 0
        self.offset = offset
        self.timers: list[tuple[int, str, int]] = []

    def now_ms(self) -> int:
        return self.sim_now + self.offset

    def sim_time_of(self, at_ms: int) -> int:
        return max(self.sim_now, self.sim_now + at_ms - self.now_ms())

    def schedule_core(self, at: int, name: str, token: int) -> None:
        self.timers.append((at, name, token))

    def run(self, driver: Any, until: int) -> int:
        """Fire every timer up to `until` in time order; how many did something."""
        fired = 0
        while True:
            due = sorted(t for t in self.timers if t[0] <= until)
            if not due:
                return fired
            at, _name, token = due[0]
            self.timers.remove(due[0])
            self.sim_now = max(self.sim_now, at)
            fired += driver.timer.live(token)
            driver.fire(token)


class Core:
    def __init__(self) -> None:
        self.polls: list[int] = []
        self.deadline: int | None = None
        self.to_send: list[Outbound] = []
        self.answers: list[Any] = []
        self.errors: list[Exception] = []

    def wakeup(self) -> None:
        pass

    def poll(self, now_ms: int) -> Poll:
        self.polls.append(now_ms)
        out, self.to_send = self.to_send, []
        return Poll(out, self.deadline)

    def on_response(self, out: Outbound, answer: Any, now_ms: int) -> None:
        self.answers.append(answer)

    def on_error(self, out: Outbound, error: Exception, now_ms: int) -> None:
        self.errors.append(error)


def test_polled_once_however_often_woken_and_at_its_deadline():
    host, core = Host(offset=1000), Core()
    driver = SimCoreDriver(host, core, "c", lambda out, cb: None)
    driver.start()
    core.wakeup()
    core.wakeup()
    core.deadline = 1500  # host clock: 500 ms from now
    assert host.run(driver, 0) == 1 and core.polls == [1000]
    core.deadline = None
    assert host.run(driver, 499) == 0
    assert host.run(driver, 500) == 1 and core.polls == [1000, 1500]


def test_a_sooner_timer_supersedes_a_later_one():
    host, core = Host(), Core()
    driver = SimCoreDriver(host, core, "c", lambda out, cb: None)
    core.deadline = 1000
    driver.start()
    host.run(driver, 0)
    core.deadline = None
    host.sim_now = 10
    driver.wakeup()  # sooner: the timer at 1000 does nothing now
    assert host.run(driver, 2000) == 1 and core.polls == [0, 10]


def test_answers_and_failures_go_back_to_the_core_which_is_polled_again():
    host, core = Host(), Core()
    sent: list[Any] = []
    driver = SimCoreDriver(host, core, "c", lambda out, cb: sent.append(cb))
    core.to_send = [Outbound(1, 0, "a"), Outbound(1, 0, "b"), Outbound(1, 0, "c")]
    driver.start()
    host.run(driver, 0)
    assert len(sent) == 3
    sent[0]("answer")
    sent[1](None)  # no answer in time
    sent[2](NoAnswer("NOT_CONTROLLER"))
    assert core.answers == ["answer"] and len(core.errors) == 2
    assert all(isinstance(e, NoAnswer) for e in core.errors)
    assert host.run(driver, 0) == 1 and len(core.polls) == 2
    core.to_send = [Outbound(1, 0, "d")]
    driver.wakeup()
    host.run(driver, 0)
    host.incarnation += 1  # a crash: what the old incarnation sent is forgotten
    sent[3]("late")
    assert core.answers == ["answer"]


class Op(DelayedOperation):
    def __init__(self, deadline_ms: int) -> None:
        super().__init__(deadline_ms)
        self.expired = False

    def try_complete(self) -> bool:
        return False

    def on_expiration(self) -> None:
        self.expired = True

    def on_complete(self) -> None:
        pass


class Key:
    def watch(self, watcher: Any) -> None:
        pass

    def unwatch(self, watcher: Any) -> None:
        pass


def test_the_purgatory_expires_at_the_deadline_on_the_host_clock():
    host = Host(offset=5000)
    purgatory = DelayedOperationPurgatory("test")
    driver = SimPurgatoryDriver(host, purgatory)
    late, soon = Op(5000 + 900), Op(5000 + 300)
    purgatory.watch(late, [Key()])
    purgatory.watch(soon, [Key()])
    host.run(driver, 299)
    assert not soon.expired
    host.run(driver, 300)
    assert soon.expired and not late.expired
    host.run(driver, 900)
    assert late.expired and purgatory.delayed() == 0
