"""An ISR change in flight survives the metadata catching up with the previous one.

Found by the data-plane simulation (`python -m gregor.sim --seed 1915 --scenario replication`
at commit 31e18be): the leader's AlterPartition answer brought partition epoch 7 (ISR {3, 1});
the leader then proposed adding broker 2 (7 -> 8) and the controller committed it; the
metadata record of epoch 7 arrived meanwhile, and applying it reset the leader to its
committed ISR, dropping the expansion in flight. The HW then moved on without broker 2, which
the controller already counted in the ISR: acknowledged writes missing from an ISR member,
lost if it is elected next."""

from __future__ import annotations

from pathlib import Path

from gregor.protocol import errors
from gregor.replication.partition import IsrUpdate

from .helpers import NOW, Cluster, host, manager, produce, registration
from .test_partition import fetch


def test_the_metadata_of_the_last_answered_change_keeps_the_next_one_in_flight(
    tmp_path: Path,
) -> None:
    cluster = Cluster()
    rm = manager(tmp_path, 1, cluster)
    sent: list[IsrUpdate] = []
    rm.on_isr_update = lambda p, u: sent.append(u)
    p = host(rm, registration(1, 4, (1,), partition_epoch=6))
    # broker 3 catches up and joins: the answer brings partition epoch 7
    fetch(p, 3, 0)
    assert sent[-1].adding == 3
    p.on_alter_partition_result(sent[-1], errors.NONE, 4, 7, (1, 3), NOW)
    assert (p.isr, p.partition_epoch) == ([1, 3], 7)
    # broker 2 catches up too: its addition is in flight
    fetch(p, 2, 0)
    expand = sent[-1]
    assert expand.adding == 2 and p.pending is expand
    # the metadata brings epoch 7, the state the answer already gave
    host(rm, registration(1, 4, (1, 3), partition_epoch=7))
    assert p.pending is expand
    # so broker 2 still holds the HW back: what it lacks is not committed without it
    produce(p, 2)
    fetch(p, 3, 2)
    assert p.log.high_watermark == 0
    fetch(p, 2, 2)
    assert p.log.high_watermark == 2
    # and the answer to the expansion still applies
    p.on_alter_partition_result(expand, errors.NONE, 4, 8, (1, 2, 3), NOW)
    assert (p.isr, p.partition_epoch, p.pending) == ([1, 2, 3], 8, None)


def test_an_isr_change_is_counted_once_whether_the_metadata_or_the_answer_comes_first(
    tmp_path: Path,
) -> None:
    rm = manager(tmp_path, 1, Cluster())
    sent: list[IsrUpdate] = []
    rm.on_isr_update = lambda p, u: sent.append(u)
    p = host(rm, registration(1, 4, (1,), partition_epoch=6))
    # broker 3 joins; the answer comes first, then the metadata of the same epoch
    fetch(p, 3, 0)
    p.on_alter_partition_result(sent[-1], errors.NONE, 4, 7, (1, 3), NOW)
    host(rm, registration(1, 4, (1, 3), partition_epoch=7))
    assert (rm.isr_expands, rm.isr_shrinks) == (1, 0)
    # broker 2 joins; the metadata comes first, then the answer, now out of date
    fetch(p, 2, 0)
    expand = sent[-1]
    host(rm, registration(1, 4, (1, 2, 3), partition_epoch=8))
    p.on_alter_partition_result(expand, errors.NONE, 4, 8, (1, 2, 3), NOW)
    assert (p.isr, p.pending) == ([1, 2, 3], None)
    assert (rm.isr_expands, rm.isr_shrinks) == (2, 0)
    # the controller takes broker 2 out (fenced) in the same leader epoch: a shrink
    host(rm, registration(1, 4, (1, 3), partition_epoch=9))
    assert (rm.isr_expands, rm.isr_shrinks) == (2, 1)
    # a new leader epoch is an election, not an ISR change of ours
    host(rm, registration(1, 5, (1,), partition_epoch=10))
    assert (rm.isr_expands, rm.isr_shrinks) == (2, 1)
