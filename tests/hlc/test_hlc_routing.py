"""Home-region routing: Kafka's murmur2 (its known values, and kafka-python's as an oracle),
fixed answers that must never change, independence from list order, and minimal movement when
a region is added."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from gregor.hlc import home_region, murmur2

pytestmark = pytest.mark.unit

# Kafka's own test vectors (UtilsTest.testMurmur2), as Java's signed ints.
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_murmur2_gives_kafkas_values() -> None:
    for data, expected in KAFKA_VECTORS.items():
        assert murmur2(data) == expected


@given(st.binary(max_size=64))
def test_murmur2_agrees_with_kafka_python(data: bytes) -> None:
    assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data) & 0xFFFFFFFF


def test_home_region_answers_are_fixed() -> None:
    """A change here moves entities between regions in every deployment: never change it."""
    regions = ["eu", "us", "ap"]
    got = [home_region(f"customer-{i}", regions) for i in range(10)]
    assert got == ["ap", "ap", "eu", "ap", "eu", "us", "ap", "eu", "us", "us"]
    assert home_region(b"customer-0", ["eu", "us", "ap"]) == "ap"


@given(st.binary(max_size=32), st.permutations(["A", "B", "C", "D"]))
def test_home_region_does_not_depend_on_the_order_of_regions(key: bytes, regions) -> None:
    assert home_region(key, regions) == home_region(key, ["A", "B", "C", "D"])


def test_adding_a_region_moves_only_the_keys_it_wins() -> None:
    keys = [f"k{i}".encode() for i in range(3000)]
    before = {k: home_region(k, ["A", "B", "C"]) for k in keys}
    after = {k: home_region(k, ["A", "B", "C", "D"]) for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert all(after[k] == "D" for k in moved)
    assert 600 < len(moved) < 900  # about a quarter
    spread = {r: list(before.values()).count(r) for r in "ABC"}
    assert all(900 < n < 1100 for n in spread.values()), spread


def test_no_regions_is_an_error() -> None:
    with pytest.raises(ValueError, match="no regions"):
        home_region(b"k", [])
