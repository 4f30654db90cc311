"""A hypothesis model of one leader partition and two followers: appends, follower fetches at
any offset up to the leader's log end, a clock, ISR shrinks and expansions answered (or not) by
a controller. After every step: the high watermark never goes back, never passes the log end,
and never passes the log end offset of any member of the ISR it counts (so an acknowledged
acks=all write is on every ISR member)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from gregor.protocol import errors
from gregor.replication.partition import IsrUpdate

from .helpers import NOW, Cluster, host, manager, produce, registration

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3)),
        st.tuples(st.just("fetch"), st.sampled_from([2, 3]), st.integers(0, 100)),
        st.tuples(st.just("tick"), st.integers(0, 6_000)),
        st.tuples(st.just("shrink"), st.just(0)),
        st.tuples(st.just("answer"), st.sampled_from(["commit", "refuse", "lose"])),
    ),
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(ops=OPS, min_isr=st.integers(1, 3))
def test_the_high_watermark_stays_within_the_isr(ops: list[tuple], min_isr: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        cluster = Cluster()
        rm = manager(Path(d), 1, cluster, lag_ms=5_000)
        sent: list[IsrUpdate] = []
        rm.on_isr_update = lambda p, u: sent.append(u)
        p = host(rm, registration(1, 0, (1, 2, 3)), min_isr=min_isr)
        now = NOW
        followers = {2: 0, 3: 0}  # each follower's log end: it only grows
        last_hw = 0
        for op in ops:
            kind = op[0]
            if kind == "append":
                produce(p, op[1], now_ms=now, acks=1)
            elif kind == "fetch":
                b = op[1]
                offset = max(followers[b], min(op[2], p.log.log_end_offset))
                followers[b] = offset
                p.fetch_for_follower(b, 100 + b, offset, -1, 0, 0, 1 << 20, True, now)
            elif kind == "tick":
                now += op[1]
            elif kind == "shrink":
                p.maybe_shrink_isr(now)
            elif sent:
                update = sent.pop()
                if op[1] == "commit":
                    p.on_alter_partition_result(
                        update, errors.NONE, 0, p.partition_epoch + 1, update.new_isr, now
                    )
                elif op[1] == "refuse":
                    p.on_alter_partition_result(update, errors.BY_NAME["INELIGIBLE_REPLICA"].code)
            hw = p.high_watermark
            assert last_hw <= hw <= p.log.log_end_offset
            if hw > last_hw:
                assert len(p.isr) >= min(min_isr, 3), "the HW moved while under min ISR"
            last_hw = hw
            for b in p.maximal_isr - {1}:
                assert followers[b] >= hw or p.followers[b].log_end_offset == -1 and hw == 0, (
                    b,
                    hw,
                )
        rm.logs.shutdown()
