"""The deterministic simulation: many seeds per fault scenario with the invariants checked after
every event, replay by seed, and proof that the checker catches a broken node."""

from __future__ import annotations

import pytest

from gregor.raft.node import RaftNode
from gregor.raft.quorum_state import Kind
from gregor.sim.__main__ import main
from gregor.sim.cluster import SimConfig, Simulation, run_seed

FAST = SimConfig(steps=2000, settle_ms=12_000)

# scenario -> seeds: about 300 runs in all
SEEDS = {
    "mixed": range(1, 101),
    "isolate-leader": range(1, 51),
    "crash": range(1, 51),
    "slow": range(1, 51),
    "partition": range(1, 51),
}


def run_all(
    config: SimConfig, seeds: range, node_factory=RaftNode
) -> tuple[list[str], dict[str, int]]:
    """(summaries of the failed runs, fault counts summed over all runs)"""
    failed, faults = [], {}
    for seed in seeds:
        result = run_seed(seed, config, node_factory)
        if not result.ok:
            failed.append(result.summary())
        for name, count in result.faults.items():
            faults[name] = faults.get(name, 0) + count
    return failed, faults


# what each scenario must have done at least once over its seeds
EXERCISED = {
    "mixed": ("isolate_leader", "crash_leader", "slow", "resign", "split", "snapshot"),
    "isolate-leader": ("isolate_leader",),
    "crash": ("crash", "crash_leader", "lost_unflushed_batches"),
    "slow": ("slow",),
    "partition": ("split", "isolate_node"),
}


@pytest.mark.parametrize("scenario", sorted(SEEDS))
def test_invariants_hold_over_many_seeds(scenario):
    config = SimConfig(steps=FAST.steps, settle_ms=FAST.settle_ms, scenario=scenario)
    failed, faults = run_all(config, SEEDS[scenario])
    assert failed == []
    assert all(faults.get(f) for f in EXERCISED[scenario]), faults


def test_five_voters_and_an_observer():
    config = SimConfig(nodes=5, observers=1, steps=FAST.steps, settle_ms=FAST.settle_ms)
    assert run_all(config, range(1, 21))[0] == []


def test_the_same_seed_replays_the_same_run():
    first, again = run_seed(42, FAST), run_seed(42, FAST)
    assert first.ok and again.ok
    assert first.trace_digest == again.trace_digest
    assert first.summary() == again.summary()
    assert run_seed(43, FAST).trace_digest != first.trace_digest


class SkipsLogCheck(RaftNode):
    """A deliberately broken voter: it grants (pre-)votes without the log up-to-date check."""

    def _log_up_to_date(self, last_epoch: int, end_offset: int) -> bool:
        return True


def test_the_checker_catches_a_node_that_skips_the_log_check():
    config = SimConfig(steps=FAST.steps, settle_ms=FAST.settle_ms, scenario="crash")
    caught = [run_seed(seed, config, SkipsLogCheck) for seed in range(1, 11)]
    violations = [r for r in caught if not r.ok]
    assert violations, "no seed caught the broken vote"
    assert {r.invariant for r in violations} <= {
        "leader completeness",
        "committed entries never change",
    }
    assert "seed" in violations[0].summary() and "last events" in violations[0].summary()


def test_an_isolated_follower_does_not_disrupt_the_quorum_when_it_returns():
    sim = Simulation(5, SimConfig(scenario="quiet"))
    sim.start()
    sim.run_until(5_000)
    leader = sim.leader()
    assert leader is not None and leader.node is not None
    epoch = leader.node.epoch
    follower = next(i for i in sim.voters if i != leader.node_id)
    part = sim.network.cut([[follower], [i for i in sim.hosts if i != follower]], "isolate")
    sim.run_until(25_000)  # ten fetch timeouts: it keeps asking for pre-votes nobody hears
    isolated = sim.hosts[follower].node
    assert isolated is not None and isolated.epoch == epoch
    sim.network.heal(part.partition_id)
    sim.run_until(35_000)
    assert leader.node.state is Kind.LEADER and leader.node.epoch == epoch
    assert isolated.state is Kind.FOLLOWER and isolated.leader_id == leader.node_id
    sim.settle()


def test_an_isolated_leader_resigns_and_a_new_one_takes_over():
    sim = Simulation(9, SimConfig(scenario="quiet"))
    sim.start()
    sim.run_until(5_000)
    old = sim.leader()
    assert old is not None and old.node is not None
    epoch = old.node.epoch
    sim.network.cut([[old.node_id], [i for i in sim.hosts if i != old.node_id]], "isolate leader")
    sim.run_until(5_000 + sim.config.raft.check_quorum_timeout_ms + 100)
    assert old.node.state is not Kind.LEADER  # check-quorum: no majority fetched, it resigned
    sim.run_until(15_000)
    new = sim.leader()
    assert new is not None and new.node is not None
    assert new.node_id != old.node_id and new.node.epoch > epoch
    sim.settle()


def test_command_line_replays_a_seed(capsys):
    assert main(["--seed", "3", "--steps", "500", "--settle-ms", "8000"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("seed 3 [mixed]: ok;")
    assert main(["--seeds", "1-3", "--steps", "300", "--settle-ms", "8000", "--quiet"]) == 0
    assert "3 seeds, 0 failed" in capsys.readouterr().out


class DurableMajorityCheck(Simulation):
    """After every event: the leader's high watermark is held durably (flushed on their disks)
    by a majority of voters, so no crash can lose a committed entry."""

    flushes = 0

    def _flushed(self, node_id: int, incarnation: int, offset: int) -> None:
        self.flushes += 1
        super()._flushed(node_id, incarnation, offset)

    def step(self) -> None:
        super().step()
        leader = self.leader()
        if leader is None or leader.node is None or leader.node.high_watermark is None:
            return
        durable = sorted((self.hosts[v].disk.flushed_offset for v in self.voters), reverse=True)
        majority = len(self.voters) // 2 + 1
        assert leader.node.high_watermark <= durable[majority - 1], (
            f"seed {self.seed}: hw {leader.node.high_watermark} of {leader.node_id}, "
            f"durable {durable}"
        )


def test_flushes_off_the_loop_commit_only_what_a_majority_made_durable():
    """Nodes flush asynchronously (the effect and its completion); with slow disks (up to 40
    ms, far longer than the network) a flush is often in flight when a node crashes: committed
    entries still survive, and the high watermark never passes what a majority flushed."""
    config = SimConfig(
        steps=FAST.steps, settle_ms=FAST.settle_ms, scenario="crash", disk_delay_ms=(5, 40)
    )
    flushed = lost = 0
    for seed in range(1, 16):
        sim = DurableMajorityCheck(seed, config)
        result = sim.run()
        assert result.ok, result.summary()
        flushed += sim.flushes
        lost += result.faults.get("lost_unflushed_batches", 0)
    assert flushed > 1000 and lost > 0  # crashes did catch flushes in flight
