"""The last-write-wins resolver: its rules on examples, and (hypothesis) that its merge is
commutative, associative and idempotent, so that any interleaving and duplication of the same
writes gives the same state, equal to an oracle computed from the set of writes."""

from __future__ import annotations

from functools import reduce

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gregor.hlc import KeyState, Resolver, Timestamp, Write, merge, merge_views
from gregor.hlc import version_vector as vvs
from gregor.hlc.resolver import maximal, state_of

pytestmark = pytest.mark.unit


def w(value, ms, logical=0, node=1, key=b"k", vv=None) -> Write:
    return Write(key, value, Timestamp(ms, logical, node), vv)


def test_greatest_hlc_wins_and_node_id_breaks_ties() -> None:
    r = Resolver()
    assert r.apply(w(b"a", 100)).changed
    assert not r.apply(w(b"old", 99, 5)).changed
    assert r.apply(w(b"b", 100, 1)).changed
    assert r.value(b"k") == b"b"
    assert r.apply(w(b"node2", 100, 1, node=2)).changed  # same clock reading, greater node id
    assert not r.apply(w(b"node1", 100, 1, node=1)).changed
    assert r.value(b"k") == b"node2"


def test_a_tombstone_is_a_write() -> None:
    r = Resolver()
    r.apply(w(b"v", 100))
    assert r.apply(w(None, 200)).changed
    assert r.value(b"k") is None and r.get(b"k").tombstone
    assert not r.apply(w(b"late", 150)).changed  # an older write does not resurrect the key
    assert r.values() == {}
    r.apply(w(b"again", 300))
    assert r.values() == {b"k": b"again"}


def test_concurrent_writes_are_reported_and_a_merging_write_closes_the_conflict() -> None:
    r = Resolver()
    base = vvs.make({1: 1})
    r.apply(w(b"base", 100, vv=base))
    a = w(b"from-1", 200, node=1, vv=vvs.bump(base, 1))
    b = w(b"from-2", 150, node=2, vv=vvs.bump(base, 2))
    assert r.apply(a).new_losers == ()
    applied = r.apply(b)  # concurrent with a, and older: it loses
    assert applied.new_losers == (b,) and not applied.changed
    assert r.conflicts == 1 and r.value(b"k") == b"from-1"
    assert r.apply(b).new_losers == ()  # a duplicate is not a second conflict
    fixed = w(b"merged", 300, vv=vvs.bump(vvs.merge(a.vv, b.vv), 1))
    applied = r.apply(fixed)
    assert applied.state.siblings == {fixed} and applied.state.losers == frozenset()
    assert r.conflicts == 1


def test_writes_without_version_vectors_never_conflict() -> None:
    r = Resolver()
    r.apply(w(b"a", 1, node=1))
    r.apply(w(b"b", 2, node=2))
    assert r.conflicts == 0 and r.value(b"k") == b"b"


def test_views_merge_key_by_key() -> None:
    a = {b"x": state_of(w(b"1", 5, key=b"x")), b"y": state_of(w(b"2", 5, key=b"y"))}
    b = {b"x": state_of(w(b"3", 9, key=b"x"))}
    merged = merge_views(a, b)
    assert merged[b"x"].winner.value == b"3" and merged[b"y"].winner.value == b"2"
    assert merge_views(a, b) == merge_views(b, a)


# -- properties ---------------------------------------------------------------------------------

KEYS = [b"a", b"b", b"c"]
# Small ranges, so that equal clock readings, equal vectors and duplicates are common.
vectors = st.none() | st.dictionaries(st.integers(1, 3), st.integers(0, 2), max_size=3).map(
    vvs.make
)
writes = st.builds(
    Write,
    key=st.sampled_from(KEYS),
    value=st.none() | st.sampled_from([b"", b"x", b"y"]),
    hlc=st.builds(Timestamp, st.integers(0, 3), st.integers(0, 2), st.integers(1, 3)),
    vv=vectors,
)
one_key_writes = writes.map(lambda x: Write(b"k", x.value, x.hlc, x.vv))
states = st.lists(one_key_writes, min_size=1, max_size=6).map(
    lambda ws: reduce(merge, map(state_of, ws))
)


@given(states, states)
def test_merge_is_commutative(a: KeyState, b: KeyState) -> None:
    assert merge(a, b) == merge(b, a)


@given(states, states, states)
def test_merge_is_associative(a: KeyState, b: KeyState, c: KeyState) -> None:
    assert merge(a, merge(b, c)) == merge(merge(a, b), c)


@given(states)
def test_merge_is_idempotent(a: KeyState) -> None:
    assert merge(a, a) == a


def oracle(ws: list[Write]) -> dict[bytes, tuple[Write, frozenset[Write]]]:
    """From the set of writes alone: the greatest by rank, and the maximal versioned writes."""
    out = {}
    for key in {x.key for x in ws}:
        mine = [x for x in ws if x.key == key]
        out[key] = (max(mine, key=Write.rank), maximal(x for x in mine if x.vv is not None))
    return out


@settings(max_examples=300)
@given(st.lists(writes, max_size=25), st.data())
def test_any_interleaving_and_duplication_gives_the_same_state(ws, data) -> None:
    dupes = data.draw(st.lists(st.sampled_from(ws), max_size=10)) if ws else []
    stream = data.draw(st.permutations(ws + dupes))
    first, second = Resolver(), Resolver()
    reported: list[Write] = []
    for x in ws:
        first.apply(x)
    for x in stream:
        reported += second.apply(x).new_losers
    assert first.states() == second.states()
    expected = oracle(ws)
    got = second.states()
    assert {k: (s.winner, s.siblings) for k, s in got.items()} == expected
    for state in got.values():  # every final loser was reported, and never the winner
        assert state.losers <= set(reported)
        assert state.winner not in state.losers
    assert len(reported) == len(set(reported)) == second.conflicts
