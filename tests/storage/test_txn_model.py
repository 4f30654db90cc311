"""A stateful, property-based test of transactions in a `Log`: hypothesis drives transactional
batches of several producers, COMMIT and ABORT markers (also for producers with nothing open),
plain and idempotent batches, rolls, truncations, and clean or unclean reopens (crashes with a
random recovery point). After every step the log holds what the model says was appended, its
.txnindex files and open transactions are what the batches say (txn_helpers.oracle, from the
segment files), the first unstable and last stable offsets follow, and the aborted transactions
a fetch gets for random ranges are those of a scan of every entry."""

from __future__ import annotations

import os
import random
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from gregor.protocol.records.records import build_batch
from gregor.storage.config import LogConfig
from gregor.storage.log import AbortedTxn, Log

from .storage_helpers import MEMORY_TMP
from .txn_helpers import assert_txn_state, end_txn, oracle, segment_file_batches, txn_batch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # a long model run

PRODUCERS = [11, 12, 13, 14]  # transactional
IDEMPOTENT = 21  # idempotent, never transactional
CONFIGS = [
    LogConfig(segment_bytes=300, index_interval_bytes=64, segment_index_bytes=4096),
    LogConfig(segment_bytes=1200, index_interval_bytes=200, segment_index_bytes=4096),
]


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch):
    """The crashes here keep the page cache (no power loss): fsync would only cost time."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


class TxnMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="gregor-txn-model-", dir=MEMORY_TMP)
        self.dir = os.path.join(self.root, "t-0")
        self.log: Log | None = None

    def teardown(self) -> None:
        if self.log is not None and not self.log.closed:
            self.log.close_handles()
        shutil.rmtree(self.root, ignore_errors=True)

    @initialize(config=st.sampled_from(CONFIGS), seed=st.integers(0, 1 << 32))
    def setup(self, config: LogConfig, seed: int) -> None:
        self.config = config
        self.rng = random.Random(seed)
        self.log = Log.open(self.dir, config, now_ms=0)
        # What was appended and not truncated: (base offset, last offset, producer id, kind).
        self.history: list[tuple[int, int, int, str]] = []
        self.last_seqs: dict[int, int] = {}  # a data batch's last offset -> its last sequence

    # -- the model ----------------------------------------------------------------------------

    def _next_seq(self, pid: int) -> int:
        """The sequence the producer state expects next: after the producer's last data batch
        still in the log (markers leave it alone), else 0."""
        for _base, last, p, kind in reversed(self.history):
            if p == pid and kind in ("txn", "idem"):
                return self.last_seqs[last] + 1
        return 0

    def _open(self) -> dict[int, int]:
        opened: dict[int, int] = {}
        for base, _last, pid, kind in self.history:
            if kind == "txn":
                opened.setdefault(pid, base)
            elif kind in ("commit", "abort"):
                opened.pop(pid, None)
        return opened

    def _sync_hw(self) -> None:
        assert self.log is not None
        self.log.update_high_watermark(self.log.log_end_offset)

    # -- rules --------------------------------------------------------------------------------

    @rule(pid=st.sampled_from(PRODUCERS), n=st.integers(1, 4))
    def transactional_data(self, pid: int, n: int) -> None:
        assert self.log is not None
        seq = self._next_seq(pid)
        info = self.log.append(txn_batch(pid, seq, n, key=b"t"))
        self.history.append((info.first_offset, info.last_offset, pid, "txn"))
        self.last_seqs[info.last_offset] = seq + n - 1
        self._sync_hw()

    @rule(pid=st.sampled_from(PRODUCERS), commit=st.booleans())
    def end_transaction(self, pid: int, commit: bool) -> None:
        assert self.log is not None
        offset = end_txn(self.log, pid, commit)
        self.history.append((offset, offset, pid, "commit" if commit else "abort"))
        self._sync_hw()

    @rule(n=st.integers(1, 5), idempotent=st.booleans())
    def other_data(self, n: int, idempotent: bool) -> None:
        assert self.log is not None
        if idempotent:
            seq = self._next_seq(IDEMPOTENT)
            batch = build_batch(
                [(b"i", b"v")] * n, producer_id=IDEMPOTENT, producer_epoch=0, base_sequence=seq
            )
            info = self.log.append(batch)
            self.history.append((info.first_offset, info.last_offset, IDEMPOTENT, "idem"))
            self.last_seqs[info.last_offset] = seq + n - 1
        else:
            info = self.log.append(build_batch([(b"p", b"v")] * n))
            self.history.append((info.first_offset, info.last_offset, -1, "plain"))
        self._sync_hw()

    @rule()
    def roll(self) -> None:
        assert self.log is not None
        self.log.roll()

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        assert self.log is not None
        if self.log.log_end_offset == 0:
            return
        offset = data.draw(st.integers(0, self.log.log_end_offset - 1), label="truncate_to")
        self.log.truncate_to(offset)
        self.history = [h for h in self.history if h[1] < offset]
        if offset == 0:
            self.history = []
        self._sync_hw()

    @rule()
    def reopen_clean(self) -> None:
        assert self.log is not None
        self.log.close()
        self.log = Log.open(self.dir, self.config, now_ms=0)

    @rule(data=st.data())
    def reopen_unclean(self, data: st.DataObject) -> None:
        assert self.log is not None
        recovery_point = data.draw(st.integers(0, self.log.recovery_point), label="recovery_point")
        self.log.close_handles()  # a crash: no snapshot at the end, nothing trimmed
        self.log = Log.open(
            self.dir, self.config, recovery_point=recovery_point, clean_shutdown=False, now_ms=0
        )
        self._sync_hw()

    @rule()
    def flush(self) -> None:
        assert self.log is not None
        self.log.flush()

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def agrees_with_the_model(self) -> None:
        log = self.log
        if log is None:
            return
        stored = [
            (h.base_offset, h.last_offset, h.producer_id)
            for _base, batches in segment_file_batches(log)
            for h, _data in batches
        ]
        assert stored == [(b, last, p) for b, last, p, _kind in self.history]
        assert_txn_state(log)
        opened = self._open()
        first = min(opened.values(), default=None)
        assert dict(log.producer_state.ongoing) == {f: p for p, f in opened.items()}
        assert log.first_unstable_offset == first
        assert log.last_stable_offset == (log.log_end_offset if first is None else first)

    @invariant()
    def fetches_get_every_overlapping_abort(self) -> None:
        log = self.log
        if log is None:
            return
        expected, _ = oracle(log)
        entries = [e for base in sorted(expected) for e in expected[base]]
        end = log.log_end_offset
        for _ in range(6):
            start = self.rng.randint(0, end)
            upper = self.rng.randint(start, end + 1)
            want = [AbortedTxn(p, f) for p, f, last, _lso in entries if last >= start and f < upper]
            assert log.collect_aborted_transactions(start, upper) == want, (start, upper)


TxnMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestTxnModel = TxnMachine.TestCase
