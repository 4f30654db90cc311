"""A leader led again after epochs it never saw forgets what it knew of its followers' logs
(replication/partition.py make_leader). Found by the simulation (seed 548): broker 2 led t-0
in epoch 3, its follower 3 fetched up to 30 while the HW stayed 27; cut off, broker 2 missed
epoch 4, in which broker 3 followed broker 1 and truncated to 27; elected again in epoch 5
(ISR {2, 3}), broker 2 took follower 3's old log end and moved the HW to 30, over batches
broker 3 no longer had. Re-elected in the very next epoch, no one else led in between: there
the follower state is kept, as Kafka keeps it."""

from __future__ import annotations

from pathlib import Path

from .helpers import NOW, Cluster, host, manager, produce, registration


def follower_fetch(p, broker: int, offset: int, epoch: int) -> None:
    p.fetch_for_follower(broker, 100 + broker, offset, -1, epoch, 0, 1 << 20, True, NOW)


def test_led_again_after_an_epoch_it_missed_the_hw_waits_for_the_followers(tmp_path: Path):
    rm = manager(tmp_path, 2, Cluster())
    p = host(rm, registration(2, 3, (1, 2, 3)))
    produce(p, 27)
    follower_fetch(p, 1, 27, 3)
    follower_fetch(p, 3, 27, 3)
    assert p.log.high_watermark == 27
    produce(p, 3)  # 27-29: broker 3 fetches them, broker 1 never does
    follower_fetch(p, 3, 30, 3)
    assert p.log.high_watermark == 27
    host(rm, registration(2, 5, (2, 3), partition_epoch=2))  # epoch 4 was broker 1's
    assert p.is_leader and p.leader_epoch == 5
    assert p.log.high_watermark == 27, "follower 3's log end of epoch 3 may be gone"
    follower_fetch(p, 3, 30, 5)  # it fetched again in epoch 5: now it is known
    assert p.log.high_watermark == 30


def test_led_again_in_the_next_epoch_the_follower_state_is_kept(tmp_path: Path):
    rm = manager(tmp_path, 2, Cluster())
    p = host(rm, registration(2, 3, (1, 2, 3)))
    produce(p, 30)
    follower_fetch(p, 1, 27, 3)
    follower_fetch(p, 3, 30, 3)
    assert p.log.high_watermark == 27
    host(rm, registration(2, 4, (2, 3), partition_epoch=2))  # broker 1 left the ISR
    assert p.log.high_watermark == 30
