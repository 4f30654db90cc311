"""Metadata snapshots: Kafka's file layout (header batch, record batches, footer batch), an image
rebuilt from its snapshot equals the one written (random operations through LocalController),
automatic snapshots by bytes and by time move the log start up and delete segments, a restart
loads the snapshot then replays the log after it, and a damaged snapshot file is skipped when
the log still covers it, else refused with a clear error."""

from __future__ import annotations

import logging
import os
import random
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from gregor.clock import ManualClock
from gregor.controller.local import LocalController
from gregor.controller.quorum_controller import Listener
from gregor.controller.scram_credentials import Deletion, Upsertion
from gregor.metadata import records as r
from gregor.metadata import snapshot as ms
from gregor.metadata.image import MetadataImage
from gregor.metadata.raft_store import MetadataLogError, RaftMetadataStore
from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import read_batch_records
from gregor.raft import control, snapshot_file
from gregor.raft.storage_log import CORRUPT_SUFFIX, DIR_NAME

NOW = 1_700_000_000_000
CLUSTER = "J8qXRwI-Qyi2G0guFTiuYw"


class Clock(ManualClock):
    """The store's and its log's clock; `now` moves it, `clock()` reads it."""

    def __init__(self) -> None:
        super().__init__(NOW)

    @property
    def now(self) -> int:
        return self.now_ms()

    @now.setter
    def now(self, value: int) -> None:
        self.advance(value - self.now_ms())

    def __call__(self) -> int:
        return self.now_ms()


def open_store(d: Path, clock: Clock, **configs: str) -> RaftMetadataStore:
    conf = {k.replace("_", "."): v for k, v in configs.items()}
    return RaftMetadataStore.open(str(d), 1, CLUSTER, clock=clock, configs=conf)


def start(d: Path, clock: Clock, **configs: str) -> tuple[RaftMetadataStore, LocalController]:
    store = open_store(d, clock, **configs)
    ctl = LocalController(store, 1, {})
    ctl.start(
        [Listener("PLAINTEXT", "127.0.0.1", 9092)], [uuid.UUID(int=4321)], "rack-a", None, clock()
    )
    return store, ctl


def same(a: MetadataImage, b: MetadataImage) -> bool:
    """Equal but for offset and epoch (a snapshot keeps only its end offset and epoch)."""
    return replace(a, offset=b.offset, epoch=b.epoch) == b


def random_operations(ctl: LocalController, rng: random.Random, n: int) -> None:
    for _ in range(n):
        topics = sorted(ctl.store.topics)
        op = rng.randrange(8)
        if op <= 1 or not topics:
            name = f"t{rng.randrange(1000)}"
            if name not in ctl.store.topics:
                configs = (
                    {"retention.ms": str(rng.randrange(1, 10**6))} if rng.random() < 0.5 else {}
                )
                ctl.create_topic(name, [[1]] * rng.randint(1, 4), configs)
        elif op == 2:
            ctl.delete_topic(rng.choice(topics))
        elif op == 3:
            ctl.add_partitions(rng.choice(topics), [[1]] * rng.randint(1, 2))
        elif op == 4:
            ctl.set_topic_configs(
                rng.choice(topics), {"cleanup.policy": rng.choice(["compact", "delete"])}
            )
        elif op == 5:
            ctl.set_broker_configs(
                rng.choice(["", "1"]), {"log.retention.ms": str(rng.randrange(1, 10**7))}
            )
        elif op == 6:
            ctl.allocate_producer_ids(1000)
        else:
            user, mech = f"u{rng.randrange(5)}", rng.choice([1, 2])
            if (user, mech) in ctl.store.image.scram and rng.random() < 0.5:
                ctl.alter_user_scram_credentials([Deletion(user, mech)], [])
            else:
                up = Upsertion(
                    user, mech, rng.randrange(4096, 16385), rng.randbytes(16), rng.randbytes(32)
                )
                ctl.alter_user_scram_credentials([], [up])


def segments(d: Path) -> list[str]:
    return sorted(n for n in os.listdir(d / DIR_NAME) if n.endswith(".log"))


def checkpoints(d: Path) -> list[str]:
    return sorted(n for n in os.listdir(d / DIR_NAME) if n.endswith(".checkpoint"))


def test_the_file_is_kafkas_layout(tmp_path: Path) -> None:
    clock = Clock()
    store, ctl = start(tmp_path, clock)
    ctl.create_topic("orders", [[1], [1]], {"cleanup.policy": "compact"})
    ctl.allocate_producer_ids(1000)
    sid = store.snapshot()
    assert sid is not None and sid.end_offset == store.node.log.end_offset
    [name] = checkpoints(tmp_path)
    assert name == f"{sid.end_offset:020d}-{sid.epoch:010d}.checkpoint"
    data = (tmp_path / DIR_NAME / name).read_bytes()
    batches = [read_batch_records(data, pos) for pos, _ in rb.iter_headers(data)]
    head, *middle, foot = batches
    assert (
        head[0].is_control
        and head[0].base_offset == 0
        and head[0].partition_leader_epoch == sid.epoch
    )
    assert control.control_type(head[1][0].key) == control.SNAPSHOT_HEADER
    assert control.decode_snapshot_header(head[1][0].value) == (0, NOW)
    assert foot[0].is_control and control.control_type(foot[1][0].key) == control.SNAPSHOT_FOOTER
    recs = [r.decode(rec.value) for _, rs in middle for rec in rs]
    assert [rec.offset for _, rs in batches for rec in rs] == list(range(len(recs) + 2))
    kinds = [type(rec).__name__ for rec in recs]
    assert kinds == [
        "FeatureLevelRecord",
        "RegisterBrokerRecord",
        "TopicRecord",
        "PartitionRecord",
        "PartitionRecord",
        "ConfigRecord",
        "ProducerIdsRecord",
    ]
    assert recs[1].rack == "rack-a" and not recs[1].fenced
    assert store.snapshot() is None, "nothing new since the last snapshot"
    store.close()


@pytest.mark.parametrize("seed", range(12))
def test_a_snapshot_rebuilds_the_image_it_was_taken_from(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    clock = Clock()
    store, ctl = start(tmp_path, clock)
    for _ in range(3):
        random_operations(ctl, rng, rng.randint(1, 40))
        image = store.image
        data = ms.encode_snapshot(image, store.epoch, NOW, NOW)
        sid = store.snapshot()
        assert sid is not None
        assert same(ms.from_snapshot(data, sid), image)
        assert same(ms.from_snapshot(store.node.log.read_snapshot(sid) or b"", sid), image)
        assert store.node.log.start_offset == sid.end_offset
    random_operations(ctl, rng, 20)  # more after the last snapshot: replayed from the log
    image, topics = (
        store.image,
        {n: (t.topic_id, t.replicas, t.configs) for n, t in store.topics.items()},
    )
    store.close()
    again = open_store(tmp_path, clock)
    assert same(again.image, image)
    assert {n: (t.topic_id, t.replicas, t.configs) for n, t in again.topics.items()} == topics
    assert again.next_producer_id == image.next_producer_id
    again.close()


def test_snapshots_by_bytes_move_the_log_start_and_delete_segments(tmp_path: Path) -> None:
    clock = Clock()
    store, ctl = start(
        tmp_path,
        clock,
        metadata_log_max_record_bytes_between_snapshots="3000",
        metadata_log_segment_bytes="1500",
    )
    for i in range(60):
        ctl.create_topic(f"t{i}", [[1]], {"retention.ms": "1000"})
    assert checkpoints(tmp_path), "a snapshot was taken on its own"
    assert len(segments(tmp_path)) <= 4, "segments below the snapshot are deleted"
    assert store.node.log.start_offset > 0
    image = store.image
    store.close()
    again = open_store(tmp_path, clock)
    assert same(again.image, image) and len(again.topics) == 60
    again.close()


def test_a_snapshot_by_time_once_the_interval_passes(tmp_path: Path) -> None:
    clock = Clock()
    store, ctl = start(tmp_path, clock, metadata_log_max_snapshot_interval_ms="60000")
    ctl.create_topic("orders", [[1]], {})
    deadline = store.poll(clock())
    assert not checkpoints(tmp_path)
    assert deadline is not None and deadline <= NOW + 60000
    clock.now += 60000
    store.poll(clock())
    assert len(checkpoints(tmp_path)) == 1
    clock.now += 120000
    store.poll(clock())
    assert len(checkpoints(tmp_path)) == 1, "nothing committed since: no new snapshot"
    store.close()


def test_a_damaged_snapshot_is_skipped_when_the_log_still_covers_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    store, ctl = start(tmp_path, clock)  # 1 GiB segments: nothing is deleted below the snapshot
    for i in range(5):
        ctl.create_topic(f"t{i}", [[1]], {})
    store.snapshot()
    ctl.create_topic("after", [[1]], {})
    image = store.image
    store.close()
    [name] = checkpoints(tmp_path)
    path = tmp_path / DIR_NAME / name
    path.write_bytes(path.read_bytes()[:-10])  # torn: no whole footer
    with caplog.at_level(logging.WARNING):
        again = open_store(tmp_path, clock)
    assert "ignoring snapshot" in caplog.text
    assert same(again.image, image)
    assert not checkpoints(tmp_path) and os.path.exists(str(path) + CORRUPT_SUFFIX)
    again.close()


def damage_the_only_snapshot(tmp_path: Path) -> str:
    """A snapshot whose log below it is deleted, then a flipped bit in it; its file name."""
    clock = Clock()
    store, ctl = start(tmp_path, clock, metadata_log_segment_bytes="1000")
    for i in range(20):
        ctl.create_topic(f"t{i}", [[1]], {})
    store.snapshot()
    store.close()
    assert segments(tmp_path)[0] != "00000000000000000000.log"
    [name] = checkpoints(tmp_path)
    path = tmp_path / DIR_NAME / name
    data = bytearray(path.read_bytes())
    data[200] ^= 0xFF  # a flipped bit: a CRC mismatch
    path.write_bytes(bytes(data))
    return name


def test_a_damaged_snapshot_with_the_log_below_it_deleted_is_a_clear_error(tmp_path: Path) -> None:
    name = damage_the_only_snapshot(tmp_path)
    with pytest.raises(MetadataLogError) as exc:
        open_store(tmp_path, Clock())
    message = str(exc.value)
    assert f"the metadata snapshot {tmp_path / DIR_NAME / name} is damaged (" in message, (
        "which file"
    )
    assert "CORRUPT_MESSAGE" in message or "CRC" in message.upper(), "why"
    assert f"the log's segments start at offset {int(segments(tmp_path)[0][:20])}" in message
    assert "only voter" in message and f"Restore {name} from a backup" in message, "what to do"
    with pytest.raises(MetadataLogError) as again:  # the damaged file is set aside by now
        open_store(tmp_path, Clock())
    assert f"{name} is damaged (set aside as damaged at an earlier start)" in str(again.value)
    assert f"Restore {name} from a backup" in str(again.value), (
        "a restart does not come up with a hole"
    )


def test_the_same_in_a_quorum_says_to_fetch_the_leaders_snapshot(tmp_path: Path) -> None:
    name = damage_the_only_snapshot(tmp_path)
    with pytest.raises(MetadataLogError) as exc:
        RaftMetadataStore.open_networked(str(tmp_path), 1, CLUSTER, [1, 2, 3])
    message = str(exc.value)
    assert f"{name} is damaged (" in message
    assert (
        f"move {tmp_path / DIR_NAME} aside" in message
        and "fetches the leader's snapshot" in message
    )
    assert "only if the other voters hold the metadata log" in message
    with pytest.raises(MetadataLogError, match="set aside as damaged at an earlier start"):
        RaftMetadataStore.open_networked(str(tmp_path), 1, CLUSTER, [1, 2, 3])


def test_check_names_what_is_wrong() -> None:
    data = snapshot_file.encode([b"\x01\x14\x00\x00"], 3, 5, 7)  # a NoOpRecord
    assert snapshot_file.check(data) is None
    assert snapshot_file.decode(data).records == [b"\x01\x14\x00\x00"]
    assert snapshot_file.check(data[:-20]) is not None  # torn
    assert snapshot_file.check(b"") is not None
    assert snapshot_file.check(data + data) is not None
