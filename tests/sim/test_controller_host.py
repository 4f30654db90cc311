"""The simulated controller's Raft driver (sim/controller_host.py): the node is polled again at
every deadline it returns, even one equal to the deadline just reached, as the real driver
(runtime/raft_driver.py) re-arms its timer at each poll."""

from __future__ import annotations

import random
from typing import Any

from gregor.controller.quorum_controller import ControllerConfig
from gregor.raft.config import RaftConfig
from gregor.raft.node import Effects
from gregor.sim.controller_host import ControllerHost

WALL = 1_000_000


class Sim:
    """The little of a simulation a controller host uses before it leads."""

    def __init__(self) -> None:
        self.now = 0
        self.rng = random.Random(1)
        self.timers: list[tuple[int, str, tuple[Any, ...]]] = []

    @property
    def wall_ms(self) -> int:
        return WALL + self.now

    def timer(self, _host: Any, at: int, name: str, *args: Any) -> None:
        self.timers.append((at, name, args))

    def send(self, _host: Any, _dst: int, _message: Any) -> None:
        pass

    def record(self, *_event: Any) -> None:
        pass


class Node:
    """A Raft node that, polled at its deadline, asks to be polled again at that same instant
    (as a candidate whose election backoff came out 0), then 100 ms later."""

    is_leader = False

    def __init__(self, deadlines: list[int]) -> None:
        self.deadlines = deadlines
        self.polls: list[int] = []

    def poll(self, now_ms: int) -> Effects:
        self.polls.append(now_ms)
        return Effects(
            next_deadline_ms=self.deadlines[min(len(self.polls), len(self.deadlines)) - 1]
        )


def test_a_deadline_equal_to_the_one_just_reached_is_polled_again():
    sim = Sim()
    node = Node([WALL + 50, WALL + 50, WALL + 150])
    host = ControllerHost(
        sim, 3001, [3001], ControllerConfig(), RaftConfig(), node_factory=lambda *_a, **_k: node
    )  # type: ignore[arg-type]
    host.boot()
    while len(node.polls) < 3:
        polls = [t for t in sim.timers if t[1] == "poll" and t[2][0] == host.poll_token]
        assert polls, f"no poll scheduled after the polls at {node.polls}"
        at, _name, args = min(polls)
        sim.timers.remove((at, "poll", args))
        sim.now = at
        host.timer_poll(*args)
    assert node.polls == [WALL, WALL + 50, WALL + 50]
