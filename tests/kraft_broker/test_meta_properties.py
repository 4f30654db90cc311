"""meta.properties in Kafka's KRaft format: written in every log dir at the first start, checked
at every start, refused with the file named when it belongs to another cluster or node."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from gregor.metadata import meta_properties as mp


def test_ids_are_kafka_uuid_strings() -> None:
    u = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    text = mp.uuid_to_str(u)
    assert len(text) == 22 and mp.uuid_from_str(text) == u
    for _ in range(200):
        new = mp.random_id()
        assert len(new) == 22 and not new.startswith("-") and mp.uuid_from_str(new).int >= 100
    for bad in ("", "short", "!" * 22, "A" * 23):
        with pytest.raises(ValueError):
            mp.uuid_from_str(bad)


def test_first_start_writes_every_dir_then_reads_them_back(tmp_path: Path) -> None:
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    written = mp.ensure(dirs, 4, None, fallback_cluster_id="Yp6Kc2WfQ3m9o6sXb0XnZg")
    assert {m.cluster_id for m in written.values()} == {"Yp6Kc2WfQ3m9o6sXb0XnZg"}
    assert {m.node_id for m in written.values()} == {4}
    assert len({m.directory_id for m in written.values()}) == 2
    text = (tmp_path / "a" / "meta.properties").read_text()
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert sorted(lines) == sorted(
        [
            "version=1",
            "cluster.id=Yp6Kc2WfQ3m9o6sXb0XnZg",
            "node.id=4",
            f"directory.id={mp.uuid_to_str(written[dirs[0]].directory_id)}",  # type: ignore[arg-type]
        ]
    )
    assert mp.ensure(dirs, 4) == written, "the second start reads what the first wrote"
    # A dir added to log.dirs later joins the same cluster.
    more = mp.ensure([*dirs, str(tmp_path / "c")], 4)
    assert more[str(tmp_path / "c")].cluster_id == "Yp6Kc2WfQ3m9o6sXb0XnZg"


def test_another_cluster_or_node_is_refused_naming_the_file(tmp_path: Path) -> None:
    d = str(tmp_path)
    mp.format_dirs([d], "Yp6Kc2WfQ3m9o6sXb0XnZg", 1)
    path = str(tmp_path / "meta.properties")
    with pytest.raises(mp.MetaPropertiesError) as exc:
        mp.ensure([d], 1, "J8qXRwI-Qyi2G0guFTiuYw")
    assert path in str(exc.value) and "Yp6Kc2WfQ3m9o6sXb0XnZg" in str(exc.value)
    with pytest.raises(mp.MetaPropertiesError) as exc:
        mp.ensure([d], 2)
    assert path in str(exc.value) and "node.id=1" in str(exc.value)
    other = tmp_path / "other"
    mp.format_dirs([str(other)], "J8qXRwI-Qyi2G0guFTiuYw", 1)
    with pytest.raises(mp.MetaPropertiesError, match="another cluster"):
        mp.ensure([d, str(other)], 1)


def test_version_0_and_broken_files_are_refused(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text("#\nversion=0\nbroker.id=1\ncluster.id=x\n")
    with pytest.raises(mp.MetaPropertiesError, match="version 0"):
        mp.ensure([str(tmp_path)], 1)
    (tmp_path / "meta.properties").write_text("version=1\nnode.id=1\n")
    with pytest.raises(mp.MetaPropertiesError, match="no cluster.id"):
        mp.ensure([str(tmp_path)], 1)


def test_format_refuses_a_formatted_dir_unless_told_to_skip_it(tmp_path: Path) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert mp.format_dirs([a], "Yp6Kc2WfQ3m9o6sXb0XnZg", 1) == [a]
    with pytest.raises(mp.MetaPropertiesError, match="already formatted"):
        mp.format_dirs([a, b], "Yp6Kc2WfQ3m9o6sXb0XnZg", 1)
    assert mp.format_dirs([a, b], "Yp6Kc2WfQ3m9o6sXb0XnZg", 1, ignore_formatted=True) == [b]
    with pytest.raises(ValueError):
        mp.format_dirs([str(tmp_path / "c")], "not-a-uuid", 1)
