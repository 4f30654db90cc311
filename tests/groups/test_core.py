"""The group coordinator core without I/O: deliver a request, advance time, poll, look at the
effects (records written, answers released). Every scenario's records are encoded and decoded
as they would be on disk, and several are reloaded into a fresh shard from those records alone.
"""

from __future__ import annotations

import pytest
from core_harness import PROTOCOLS, Harness, value

from gregor.coordinator.group import codes
from gregor.coordinator.group.classic import (
    COMPLETING_REBALANCE,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    VALID_PREVIOUS,
    ClassicGroup,
    GroupState,
    IllegalTransition,
)
from gregor.coordinator.group.records import GroupMetadataRecord, OffsetCommitRecord
from gregor.coordinator.group.results import JoinResult, SyncRequest, SyncResult
from gregor.coordinator.group.shard import GroupConfig
from gregor.replication.pending import Pending

G = "group-a"


def form_group(h: Harness, n: int, group: str = G, **kw: object) -> list[JoinResult]:
    """n dynamic members join together (initial delay 0 would split them, so the first joins,
    then the rest rejoin as a second generation); returns the final join answers, leader first."""
    if "instance" in kw:
        assert n == 1, "one static member at a time here"
        return [value(h.join(group, **kw))]  # type: ignore[arg-type]
    pendings = []
    for _ in range(n):
        first = h.join(group, **kw)  # type: ignore[arg-type]
        assert isinstance(first, JoinResult) and first.error == codes.MEMBER_ID_REQUIRED
        pendings.append((first.member_id, h.join(group, first.member_id, **kw)))  # type: ignore[arg-type]
    # With delay 0 the first member completes a generation alone; the others' joins started
    # another rebalance that the first must rejoin.
    group_state = h.shard.groups[group]
    while group_state.state is not COMPLETING_REBALANCE or any(
        not (isinstance(p, Pending) and p.done) for _, p in pendings
    ):
        # Everybody that got an answer rejoins (the coordinator is PreparingRebalance).
        progressed = False
        for i, (mid, p) in enumerate(pendings):
            if isinstance(p, Pending) and p.done:
                ans = p.value
                assert ans.error == codes.NONE, ans
                if (
                    group_state.state is PREPARING_REBALANCE
                    and group_state.members[mid].join is None
                ):
                    pendings[i] = (mid, h.join(group, mid, **kw))  # type: ignore[arg-type]
                    progressed = True
        if not progressed:
            break
    results = [value(p) for _, p in pendings]
    results.sort(key=lambda r: r.leader != r.member_id)
    return results


def assign_all(h: Harness, answers: list[JoinResult], group: str = G) -> dict[str, bytes]:
    """The leader assigns b"a-<i>" to each member; everybody syncs; returns the assignments."""
    leader = answers[0]
    assert leader.members, "the leader is told the members"
    assignments = {mid: f"a-{i}".encode() for i, (mid, _, _) in enumerate(leader.members)}
    followers = [h.sync(group, a.generation_id, a.member_id) for a in answers[1:]]
    assert all(isinstance(f, Pending) and not f.done for f in followers), (
        "followers wait for the leader"
    )
    mine = value(h.sync(group, leader.generation_id, leader.member_id, assignments))
    assert mine.error == codes.NONE and mine.assignment == assignments[leader.member_id]
    for a, f in zip(answers[1:], followers, strict=True):
        got = value(f)
        assert got.error == codes.NONE and got.assignment == assignments[a.member_id]
    return assignments


# -- the state machine table --------------------------------------------------------------------


def test_transition_table_is_kafkas() -> None:
    g = ClassicGroup("g", 0)
    for target in (STABLE, COMPLETING_REBALANCE, EMPTY):
        with pytest.raises(IllegalTransition):
            g.transition_to(target, 1)
    g.transition_to(PREPARING_REBALANCE, 1)
    g.transition_to(COMPLETING_REBALANCE, 2)
    with pytest.raises(IllegalTransition):
        g.transition_to(EMPTY, 3)
    g.transition_to(STABLE, 3)
    assert (g.previous_state, g.current_state_timestamp_ms) == (COMPLETING_REBALANCE, 3)
    assert VALID_PREVIOUS[GroupState.DEAD] == frozenset(GroupState)


# -- joining ------------------------------------------------------------------------------------


def test_lone_member_join_sync_with_no_initial_delay() -> None:
    h = Harness()
    first = h.join(G, version=9)
    assert isinstance(first, JoinResult) and first.error == codes.MEMBER_ID_REQUIRED
    assert first.member_id.startswith("client-")
    assert h.log == [], "handing out a member id writes nothing"
    joined = value(h.join(G, first.member_id))  # delay 0: the timer is due at once
    assert (joined.error, joined.generation_id, joined.leader, joined.protocol_name) == (
        codes.NONE,
        1,
        first.member_id,
        "range",
    )
    assert joined.members == [(first.member_id, None, PROTOCOLS[0][1])]
    assert h.shard.group_state(G) is COMPLETING_REBALANCE
    synced = value(h.sync(G, 1, joined.member_id, {joined.member_id: b"all"}))
    assert (synced.error, synced.assignment, synced.protocol_type) == (
        codes.NONE,
        b"all",
        "consumer",
    )
    assert h.shard.group_state(G) is STABLE
    [record] = h.log
    assert isinstance(record, GroupMetadataRecord) and record.value is not None
    assert record.value.generation == 1 and record.value.members[0].assignment == b"all"
    assert h.heartbeat(G, 1, joined.member_id) == codes.NONE


def test_joingroup_v3_needs_no_member_id_round_trip() -> None:
    h = Harness()
    joined = value(h.join(G, version=3))
    assert joined.error == codes.NONE and joined.member_id and joined.leader == joined.member_id


def test_initial_rebalance_delay_gathers_members() -> None:
    h = Harness(GroupConfig(initial_rebalance_delay_ms=3000))
    a = h.join_new(G)
    h.advance(1000)
    b = h.join_new(G)
    assert isinstance(a, Pending) and isinstance(b, Pending) and not a.done
    h.advance(2500)  # at 3 s the delay was extended by another 3 s, as b joined meanwhile
    assert not a.done
    h.advance(2600)
    ja, jb = value(a), value(b)
    assert ja.generation_id == jb.generation_id == 1
    assert {ja.leader} == {jb.leader} and len(
        value(a if ja.leader == ja.member_id else b).members
    ) == 2


def test_three_members_then_one_leaves_and_the_rest_rebalance() -> None:
    h = Harness(GroupConfig(initial_rebalance_delay_ms=100))
    pend = [h.join_new(G) for _ in range(3)]
    h.advance(200)
    answers = sorted((value(p) for p in pend), key=lambda r: r.leader != r.member_id)
    assert {a.generation_id for a in answers} == {1}
    assign_all(h, answers)
    leaving = answers[2].member_id
    res = h.leave(G, (leaving, None))
    assert res.error == codes.NONE and res.members == [(leaving, None, codes.NONE)]
    assert h.shard.group_state(G) is PREPARING_REBALANCE
    # The others learn of the rebalance from their heartbeats, and rejoin.
    assert h.heartbeat(G, 1, answers[0].member_id) == codes.REBALANCE_IN_PROGRESS
    p0 = h.join(G, answers[0].member_id)
    assert isinstance(p0, Pending) and not p0.done, "waits for the other member"
    p1 = h.join(G, answers[1].member_id)
    j0, j1 = value(p0), value(p1)
    assert j0.generation_id == j1.generation_id == 2
    assert len([j for j in (j0, j1) if j.members]) == 1, "only the leader gets the member list"
    assert h.heartbeat(G, 1, answers[0].member_id) == codes.ILLEGAL_GENERATION
    assert h.heartbeat(G, 2, leaving) == codes.UNKNOWN_MEMBER_ID


def test_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout() -> None:
    h = Harness(GroupConfig(initial_rebalance_delay_ms=0))
    answers = form_group(h, 2, session_ms=60_000, rebalance_ms=5_000)
    assign_all(h, answers)
    stays, silent = answers[0].member_id, answers[1].member_id
    p = h.join(G, stays, session_ms=60_000, rebalance_ms=5_000)  # the leader rejoins: rebalance
    assert isinstance(p, Pending)
    h.advance(4_999)
    assert not p.done
    h.advance(2)
    j = value(p)
    assert (j.error, j.generation_id, [m[0] for m in j.members]) == (codes.NONE, 3, [stays])
    assert silent not in h.shard.groups[G].members


def test_session_timeout_evicts_a_silent_member() -> None:
    h = Harness()
    answers = form_group(h, 2, session_ms=6000)
    assign_all(h, answers)
    live, dead = answers[0], answers[1]
    for _ in range(2):
        h.advance(2000)
        assert h.heartbeat(G, live.generation_id, live.member_id) == codes.NONE
    assert dead.member_id in h.shard.groups[G].members
    h.advance(2001)
    # Over 6 s without a heartbeat from `dead`: gone, and the group rebalances.
    assert dead.member_id not in h.shard.groups[G].members
    assert h.heartbeat(G, live.generation_id, live.member_id) == codes.REBALANCE_IN_PROGRESS
    j = value(h.join(G, live.member_id, session_ms=6000))
    assert j.generation_id == live.generation_id + 1 and [m[0] for m in j.members] == [
        live.member_id
    ]


def test_pending_member_id_expires_after_its_session() -> None:
    h = Harness()
    first = h.join(G, session_ms=6000)
    assert isinstance(first, JoinResult) and first.error == codes.MEMBER_ID_REQUIRED
    h.advance(6001)
    assert first.member_id not in h.shard.groups[G].pending_members
    late = h.join(G, first.member_id, session_ms=6000)
    assert isinstance(late, JoinResult) and late.error == codes.UNKNOWN_MEMBER_ID


def test_member_that_never_syncs_is_removed_after_the_rebalance_timeout() -> None:
    h = Harness()
    answers = form_group(h, 2, rebalance_ms=8000, session_ms=30_000)
    leader, lazy = answers
    lead_sync = h.sync(
        G, leader.generation_id, leader.member_id, {leader.member_id: b"x", lazy.member_id: b"y"}
    )
    assert value(lead_sync).assignment == b"x"
    h.advance(8001)
    assert lazy.member_id not in h.shard.groups[G].members
    assert h.shard.group_state(G) is PREPARING_REBALANCE


def test_inconsistent_protocols_and_bad_session_timeouts() -> None:
    h = Harness()
    answers = form_group(h, 1)
    assign_all(h, answers)
    other = h.join(G, protocols=[("roundrobin", b"x")], version=3)
    assert isinstance(other, JoinResult) and other.error == codes.INCONSISTENT_GROUP_PROTOCOL
    assert (
        value(h.join(G, protocol_type="connect", version=3)).error
        == codes.INCONSISTENT_GROUP_PROTOCOL
    )
    assert value(h.join("fresh", protocols=[])).error == codes.INCONSISTENT_GROUP_PROTOCOL
    assert value(h.join(G, session_ms=10)).error == codes.INVALID_SESSION_TIMEOUT
    assert value(h.join(G, session_ms=10**8)).error == codes.INVALID_SESSION_TIMEOUT
    assert value(h.join("", version=3)).error == codes.INVALID_GROUP_ID
    assert value(h.join("nope", "some-member")).error == codes.UNKNOWN_MEMBER_ID


def test_group_max_size() -> None:
    h = Harness(GroupConfig(initial_rebalance_delay_ms=0, max_size=2))
    answers = form_group(h, 2)
    assign_all(h, answers)
    third = h.join(G, version=3)
    assert isinstance(third, JoinResult) and third.error == codes.GROUP_MAX_SIZE_REACHED
    assert len(h.shard.groups[G].members) == 2


def test_sync_errors() -> None:
    h = Harness()
    [a] = form_group(h, 1)
    assert value(h.sync(G, a.generation_id + 1, a.member_id)).error == codes.ILLEGAL_GENERATION
    assert value(h.sync(G, a.generation_id, "who")).error == codes.UNKNOWN_MEMBER_ID
    assert value(h.sync("unknown-group", 1, a.member_id)).error == codes.UNKNOWN_MEMBER_ID
    r = h.run(
        h.shard.sync_group(
            SyncRequest(G, a.generation_id, a.member_id, None, "connect", None, {}), h.now
        )
    )
    assert value(r).error == codes.INCONSISTENT_GROUP_PROTOCOL


# -- static membership --------------------------------------------------------------------------


def test_static_member_restart_keeps_its_assignment_without_a_rebalance() -> None:
    h = Harness()
    pa = h.join(G, instance="inst-a", session_ms=10_000)
    ja = value(pa)
    pb = h.join(G, instance="inst-b", session_ms=10_000)
    assert isinstance(pb, Pending)
    # The second static member's join started a rebalance; the first rejoins.
    ja = value(h.join(G, ja.member_id, instance="inst-a", session_ms=10_000))
    jb = value(pb)
    answers = sorted([ja, jb], key=lambda r: r.leader != r.member_id)
    assignments = assign_all(h, answers)
    generation = ja.generation_id
    old_b = jb.member_id
    writes_before = len(h.log)

    # inst-b restarts: a JoinGroup with no member id and its instance id.
    h.advance(3000)
    rejoined = value(h.join(G, instance="inst-b", session_ms=10_000, version=9))
    assert rejoined.error == codes.NONE and rejoined.member_id != old_b
    assert rejoined.generation_id == generation, "no new generation"
    assert h.shard.group_state(G) is STABLE
    assert len(h.log) == writes_before + 1, "the new member id is persisted"
    synced = value(h.sync(G, generation, rejoined.member_id, instance="inst-b"))
    assert synced.assignment == assignments[old_b]
    # The old incarnation is fenced; the other member never noticed anything.
    assert h.heartbeat(G, generation, old_b, "inst-b") == codes.FENCED_INSTANCE_ID
    assert h.heartbeat(G, generation, ja.member_id, "inst-a") == codes.NONE


def test_static_leader_restart_with_old_joingroup_is_told_to_follow() -> None:
    h = Harness()
    [leader] = form_group(h, 1, instance="lead")
    assign_all(h, [leader])
    again = value(h.join(G, instance="lead", version=5))
    assert again.error == codes.NONE and again.leader == leader.member_id != again.member_id
    assert again.members == []
    again9 = value(h.join(G, instance="lead", version=9))
    assert again9.leader == again9.member_id and again9.skip_assignment and again9.members


def test_static_member_gone_past_its_session_is_removed() -> None:
    h = Harness()
    [a] = form_group(h, 1, instance="s", session_ms=6000)
    assign_all(h, [a])
    h.advance(6001)
    assert h.shard.groups[G].members == {}
    assert h.shard.group_state(G) is EMPTY


def test_admin_removes_static_member_by_instance_id() -> None:
    h = Harness()
    [a] = form_group(h, 1, instance="s")
    assign_all(h, [a])
    res = h.leave(G, ("", "s"), ("", "unknown-instance"))
    assert res.members == [("", "s", codes.NONE), ("", "unknown-instance", codes.UNKNOWN_MEMBER_ID)]
    assert h.shard.group_state(G) is EMPTY


# -- offsets ------------------------------------------------------------------------------------


def test_member_commits_within_its_generation() -> None:
    h = Harness()
    [a] = form_group(h, 1)
    ok = h.commit(G, {("t", 0): 10}, a.generation_id, a.member_id)
    assert ok.partitions == [("t", 0, codes.REBALANCE_IN_PROGRESS)], "before its assignment"
    assign_all(h, [a])
    ok = h.commit(G, {("t", 0): 10, ("t", 1): 20}, a.generation_id, a.member_id)
    assert ok.error == codes.NONE and [e for *_, e in ok.partitions] == [0, 0]
    assert h.committed(G) == {("t", 0): 10, ("t", 1): 20}
    assert (
        h.commit(G, {("t", 0): 1}, a.generation_id - 1, a.member_id).error
        == codes.ILLEGAL_GENERATION
    )
    assert h.commit(G, {("t", 0): 1}, a.generation_id, "x").error == codes.UNKNOWN_MEMBER_ID
    assert h.commit(G, {("t", 0): 1}).error == codes.UNKNOWN_MEMBER_ID, (
        "generation -1 needs an empty group"
    )
    assert h.commit("nogroup", {("t", 0): 1}, 3, "m", version=8).error == codes.ILLEGAL_GENERATION
    assert h.commit("nogroup", {("t", 0): 1}, 3, "m", version=9).error == codes.GROUP_ID_NOT_FOUND
    big = h.commit(G, {("t", 2): 1}, a.generation_id, a.member_id, metadata="m" * 5000)
    assert big.partitions == [("t", 2, codes.OFFSET_METADATA_TOO_LARGE)]
    assert h.committed(G) == {("t", 0): 10, ("t", 1): 20}


def test_standalone_consumer_commits_and_fetches() -> None:
    h = Harness()
    assert h.commit("solo", {("t", 3): 42}).error == codes.NONE
    assert h.committed("solo") == {("t", 3): 42}
    res = h.shard.fetch_offsets("solo", [("t", [3, 4])])
    assert [(o.partition, o.offset, o.metadata) for o in res.offsets] == [(3, 42, ""), (4, -1, "")]
    assert h.shard.group_state("solo") is EMPTY
    assert h.shard.describe_group("solo").protocol_type == ""  # type: ignore[union-attr]


def test_offsets_and_groups_survive_a_reload() -> None:
    h = Harness()
    answers = form_group(h, 2)
    assignments = assign_all(h, answers)
    gen = answers[0].generation_id
    assert h.commit(G, {("t", 0): 5, ("t", 1): 7}, gen, answers[0].member_id).error == codes.NONE
    assert h.commit(G, {("t", 0): 6}, gen, answers[1].member_id).error == codes.NONE
    assert h.commit("solo", {("u", 0): 99}).error == codes.NONE
    shard = h.reload()
    assert h.committed(G) == {("t", 0): 6, ("t", 1): 7}
    assert h.committed("solo") == {("u", 0): 99}
    group = shard.groups[G]
    assert group.state is STABLE and group.generation_id == gen
    assert group.assignments() == assignments
    # Members carry on as if nothing happened...
    for a in answers:
        assert h.heartbeat(G, gen, a.member_id) == codes.NONE
        assert value(h.sync(G, gen, a.member_id)).assignment == assignments[a.member_id]
    # ...or, silent, are evicted after a session from the load.
    h.advance(10_001)
    assert shard.groups[G].members == {}


def test_offset_expiry_and_empty_group_deletion() -> None:
    cfg = GroupConfig(
        initial_rebalance_delay_ms=0,
        offsets_retention_ms=60_000,
        offsets_retention_check_interval_ms=10_000,
    )
    h = Harness(cfg)
    [a] = form_group(h, 1)
    assign_all(h, [a])
    h.commit(G, {("t", 0): 1}, a.generation_id, a.member_id)
    h.commit("solo", {("t", 0): 1})
    h.commit("explicit", {("t", 0): 1}, retention_ms=15_000, version=2)
    # With a member, the consumer group's offsets (of a subscribed topic) never expire.
    for _ in range(10):
        h.advance(9_000)
        h.heartbeat(G, a.generation_id, a.member_id)
    assert h.committed(G) == {("t", 0): 1}
    assert "solo" not in h.shard.groups and h.committed("solo") == {}, (
        "simple group: 60 s after its commit"
    )
    assert "explicit" not in h.shard.groups
    h.leave(G, (a.member_id, None))
    assert h.shard.group_state(G) is EMPTY
    h.advance(55_000)
    assert h.committed(G) == {("t", 0): 1}, "retention counts from when the group became empty"
    h.advance(20_000)
    assert h.committed(G) == {} and G not in h.shard.groups
    tombstones = [r for r in h.log if r.value is None]
    assert {type(r) for r in tombstones} == {OffsetCommitRecord, GroupMetadataRecord}
    h.reload()
    assert h.shard.groups == {} and h.shard.offsets == {}


def test_delete_groups_and_offsets() -> None:
    h = Harness()
    [a] = form_group(h, 1)
    assign_all(h, [a])
    h.commit(G, {("t", 0): 1, ("other", 0): 2}, a.generation_id, a.member_id)
    records, res = h.shard.delete_groups([G, "missing"])
    assert res == {G: codes.NON_EMPTY_GROUP, "missing": codes.GROUP_ID_NOT_FOUND} and records == []
    # Deleting offsets of a topic the live group consumes is refused; of another, allowed.
    deleted = h.run(h.shard.delete_offsets(G, [("t", [0]), ("other", [0])]))
    assert deleted.partitions == [
        ("t", 0, codes.GROUP_SUBSCRIBED_TO_TOPIC),
        ("other", 0, codes.NONE),
    ]
    assert h.committed(G) == {("t", 0): 1}
    h.leave(G, (a.member_id, None))
    res = h.run(h.shard.delete_groups([G]))
    assert res == {G: codes.NONE}
    assert G not in h.shard.groups and h.committed(G) == {}
    h.reload()
    assert G not in h.shard.groups


def test_the_empty_group_id_commits_and_is_deleted_but_never_joins() -> None:
    """As Kafka: offsets and admin APIs take "", the membership APIs and OffsetDelete refuse it;
    its records survive a reload like any group's."""
    h = Harness()
    assert value(h.commit("", {("t", 0): 7})).partitions == [("t", 0, codes.NONE)]
    h.reload()
    assert h.committed("") == {("t", 0): 7}
    d = h.shard.describe_group("")
    assert d is not None and d.state == "Empty"
    assert value(h.join("", version=3)).error == codes.INVALID_GROUP_ID
    assert h.run(h.shard.delete_offsets("", [("t", [0])])).error == codes.INVALID_GROUP_ID
    assert h.run(h.shard.delete_groups([""])) == {"": codes.NONE}
    h.reload()
    assert h.committed("") == {} and "" not in h.shard.groups


def test_describe_and_list() -> None:
    h = Harness()
    answers = form_group(h, 2)
    d = h.shard.describe_group(G)
    assert d is not None and d.state == "CompletingRebalance" and d.protocol_data == ""
    assert all(m.assignment == b"" for m in d.members)
    assignments = assign_all(h, answers)
    d = h.shard.describe_group(G)
    assert d is not None and (d.state, d.protocol_type, d.protocol_data) == (
        "Stable",
        "consumer",
        "range",
    )
    assert {m.member_id: m.assignment for m in d.members} == assignments
    assert all(m.client_host == "/127.0.0.1" for m in d.members)
    h.commit("solo", {("t", 0): 1})
    assert {g.group_id for g in h.shard.list_groups()} == {G, "solo"}
    assert [g.group_id for g in h.shard.list_groups(["empty"])] == ["solo"]
    assert [g.group_id for g in h.shard.list_groups(["STABLE"])] == [G]
    assert h.shard.list_groups(types=["consumer"]) == []
    assert h.shard.describe_group("missing") is None


def test_determinism_same_seed_same_member_ids() -> None:
    ids = []
    for _ in range(2):
        h = Harness(seed=7)
        ids.append(value(h.join(G)).member_id)
    assert ids[0] == ids[1]


def test_duplicate_joingroup_answers_the_first() -> None:
    h = Harness(GroupConfig(initial_rebalance_delay_ms=5000))
    first = h.join(G)
    assert isinstance(first, JoinResult)
    p1 = h.join(G, first.member_id)
    p2 = h.join(G, first.member_id)
    assert isinstance(p1, Pending) and p1.done and p1.value.error == codes.REBALANCE_IN_PROGRESS
    h.advance(5001)
    assert value(p2).error == codes.NONE


def test_followers_parked_sync_is_answered_on_rebalance() -> None:
    h = Harness()
    answers = form_group(h, 2)
    follower = h.sync(G, answers[1].generation_id, answers[1].member_id)
    assert isinstance(follower, Pending) and not follower.done
    h.leave(G, (answers[0].member_id, None))
    got = value(follower)
    assert isinstance(got, SyncResult) and got.error == codes.REBALANCE_IN_PROGRESS
