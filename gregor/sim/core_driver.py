"""The simulation's drivers of the broker's sans-I/O cores: what runtime/drivers.CoreDriver and
runtime/purgatory_driver.PurgatoryDriver do over sockets and the event loop, done over the
simulated network and clock. Nothing is decided here.

    driver = SimCoreDriver(host, core, "alter-partition", send)
    driver.start()              # polls now; core.wakeup polls again (once) at this instant
    host.timer_core(name, token) -> driver.fire(token)    # the host's timers call back

    purgatory = SimPurgatoryDriver(host, DelayedOperationPurgatory("broker"))

A poll's requests each go out over `send(out, on_answer)` (the host's: to `out.destination`, or
to the active controller when None); the answer goes to `core.on_response`, no answer in time
(or NOT_CONTROLLER) to `core.on_error`, then the core is polled again, as the real driver does.
The core's deadlines are on the host's clock (which a fault may jump); the timer is set in
simulated time, `deadline - host.now_ms()` from now. One timer counts at a time: each new one
takes a new token and the older ones fire as nothing (`live`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from gregor.protocol.outbound import Outbound, Poll
from gregor.replication.purgatory import DelayedOperationPurgatory

OnAnswer = Callable[[Any], None]
Send = Callable[[Outbound, OnAnswer], None]


class NoAnswer(Exception):
    """What a core is told when its request got no answer (a timeout, NOT_CONTROLLER)."""


class Host(Protocol):
    """What a driver uses of its host (broker_host.BrokerHost)."""

    incarnation: int

    def now_ms(self) -> int: ...

    def sim_time_of(self, at_ms: int) -> int:
        """The simulated time at which this host's clock reads `at_ms` (now, if passed)."""

    def schedule_core(self, at: int, name: str, token: int) -> None:
        """Call `timer_core(name, token)` at simulated time `at`."""


class _Timer:
    """One timer at a time; a sooner one supersedes it."""

    def __init__(self, host: Host, name: str) -> None:
        self.host = host
        self.name = name
        self.token = 0
        self.at: int | None = None  # the simulated time of the live timer

    def set(self, at_ms: int) -> None:
        """Fire when the host's clock reads `at_ms`, unless the live timer fires sooner."""
        at = self.host.sim_time_of(at_ms)
        if self.at is not None and self.at <= at:
            return
        self.token += 1
        self.at = at
        self.host.schedule_core(at, self.name, self.token)

    def take(self, token: int) -> bool:
        """True if `token` is the live timer's (which is then spent)."""
        if token != self.token or self.at is None:
            return False
        self.at = None
        return True

    def live(self, token: int) -> bool:
        return token == self.token and self.at is not None


class SimCoreDriver:
    def __init__(self, host: Host, core: Any, name: str, send: Send) -> None:
        self.host = host
        self.core = core
        self.name = name
        self.send = send
        self.timer = _Timer(host, name)
        core.wakeup = self.wakeup

    def start(self) -> None:
        self.wakeup()

    def wakeup(self) -> None:
        """Poll the core at this instant (once, however often woken)."""
        self.timer.set(self.host.now_ms())

    def fire(self, token: int) -> None:
        if self.timer.take(token):
            self._poll()

    def _poll(self) -> None:
        result: Poll = self.core.poll(self.host.now_ms())
        for out in result.outbound:
            self._exchange(out)
        if result.next_deadline_ms is not None:
            self.timer.set(result.next_deadline_ms)

    def _exchange(self, out: Outbound) -> None:
        incarnation = self.host.incarnation

        def answered(answer: Any) -> None:
            if incarnation != self.host.incarnation:
                return
            now = self.host.now_ms()
            if answer is None:
                self.core.on_error(out, NoAnswer("no answer in time"), now)
            elif isinstance(answer, NoAnswer):
                self.core.on_error(out, answer, now)
            else:
                self.core.on_response(out, answer, now)
            self.wakeup()

        self.send(out, answered)


class SimPurgatoryDriver:
    """Expires the purgatory's operations at their deadlines (events complete them)."""

    def __init__(self, host: Host, purgatory: DelayedOperationPurgatory) -> None:
        self.host = host
        self.purgatory = purgatory
        self.timer = _Timer(host, "purgatory")
        purgatory.wakeup = self._reschedule

    def _reschedule(self) -> None:
        deadline = self.purgatory.next_deadline_ms()
        if deadline is not None:
            self.timer.set(deadline)

    def fire(self, token: int) -> None:
        if self.timer.take(token):
            self.purgatory.expire(self.host.now_ms())
            self._reschedule()
