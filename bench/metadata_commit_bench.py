#!/usr/bin/env python
"""Instructions each voter of a 3-node KRaft quorum spends on one topic creation, in process,
counted per node by valgrind's callgrind: the active controller's and each follower's own share
of bench/metadata_chain_bench.py's chain, without the event loop, the sockets and the timers
whose background makes that bench's per-node figures move by tens of percent from run to run.

    python bench/metadata_commit_bench.py --tree /tmp/old --tree $PWD
    python bench/metadata_commit_bench.py --tree $PWD --creations 100 --partitions 3

Three RaftNodes (voters 1, 2, 3), each over a StorageRaftLog in a temp dir and with a
RaftMetadataStore fed its commits, exchange their KRaft messages as bytes: each request and
answer is encoded and decoded by the same code the RaftDriver and the NetworkClient use
(raft/wire.py, raft/fetch_wire.py, protocol/codec.py), including the leader's node_endpoints; a
flush asked for is made (fsync) and reported with `flushed`, as the driver does; time moves only
when nothing is left to deliver, to the earliest deadline. Once a leader is elected and three
brokers are registered and unfenced through the active controller's own request handling,
`--warm` topics are created, then `--creations` are counted: each by `Admin.create_topics` on
the active controller (one topic, `--partitions` partitions, replication factor 1), then
driven until every node has replayed it. Not here: the event loop, the connections, the raft
driver's glue, the broker's hosting of new partitions and the coordinators (the chain bench
has them).

Per node: callgrind collects only while that node works (its decoding of what it receives,
its core, its encoding of what it sends, its fsyncs and its store's replay; the controller's
admin call too), switched by CALLGRIND_TOGGLE_COLLECT from a small C helper compiled for the
run (gcc and valgrind's callgrind.h), whose own cost, measured in the same run, is taken off.
One run per node and tree, so nothing else on the machine moves the figures: a tree's figure
repeats within well under 1%. Figures only.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import deque
from typing import Any

ROLES = ("controller", "follower-low", "follower-high")
CLUSTER_ID = "J8qXRwI-Qyi2G0guFTiuYw"
_COLLECTED = re.compile(r"Collected : (\d+)")
_HELPER = "#include <valgrind/callgrind.h>\nvoid toggle(void) { CALLGRIND_TOGGLE_COLLECT; }\n"
CALIBRATION = 2000  # toggle pairs with nothing between, in a run of their own: their cost
FETCH = 1


class Quorum:
    """Three voters and the bytes between them; `collect(node)` counts only `node`'s work."""

    def __init__(self, base: str, toggle: Any, measured: str) -> None:
        import random

        from gregor.metadata.raft_store import RaftMetadataStore
        from gregor.protocol import codec
        from gregor.raft import messages as m
        from gregor.raft import wire
        from gregor.raft.config import RaftConfig
        from gregor.raft.node import RaftNode
        from gregor.raft.storage_log import StorageRaftLog, fsync_and_close
        from gregor.raft.store import MemoryQuorumStateStore

        self.codec, self.m, self.wire = codec, m, wire
        self.fsync_and_close = fsync_and_close
        self.now = 1_000
        self.toggle, self.measured, self.counting = toggle, measured, False
        self.measured_id: int | None = None
        self.toggles = 0
        self.nodes: dict[int, Any] = {}
        self.stores: dict[int, Any] = {}
        self.deadlines: dict[int, int] = {}
        self.queue: deque[tuple[str, int, int, Any]] = deque()
        self.inbound: dict[tuple[int, int], tuple[int, int, int]] = {}
        self.next_local = 0
        config = RaftConfig(append_linger_ms=0)
        for i in (1, 2, 3):
            log = StorageRaftLog.open(os.path.join(base, f"node-{i}"))
            node = RaftNode(
                i, [1, 2, 3], log, MemoryQuorumStateStore(), random.Random(i), self.now,
                config, CLUSTER_ID, async_flush=True,
            )  # fmt: skip
            store = RaftMetadataStore(None, CLUSTER_ID, clock=lambda: self.now)
            store.local_id = i
            store.attach(_Driver(self, i, node))  # type: ignore[arg-type]
            self.nodes[i], self.stores[i] = node, store
            self.deadlines[i] = self.now

    # -- counting ---------------------------------------------------------------------------

    def collect(self, node_id: int | None) -> None:
        """Count from here on iff the work is the measured node's."""
        on = node_id is not None and node_id == self.measured_id
        if on != self.counting:
            self.toggle()
            self.counting = on
            self.toggles += 1

    # -- the network ------------------------------------------------------------------------

    def apply(self, node_id: int, effects: Any) -> None:
        """What the RaftDriver does with a node's effects: sends, the flush, the commits."""
        codec, m, wire = self.codec, self.m, self.wire
        for send in effects.outbound:
            message = send.message
            if isinstance(message, m.REQUEST_TYPES):
                key, version, body = wire.to_request(message)
                buffers = codec.encode_request(
                    key, version, message.correlation_id, f"raft-{node_id}", body
                )
                self.queue.append(("request", node_id, send.destination, codec.join(buffers)))
                continue
            found = self.inbound.pop((node_id, message.correlation_id), None)
            if found is None:
                continue
            key, version, correlation_id = found
            body = wire.to_response(message, version)
            if isinstance(message, m.FetchResponse) and message.leader_id > 0:
                port = 9000 + message.leader_id
                wire.add_leader_endpoint(body, version, message.leader_id, "localhost", port)
            buffers = codec.encode_response(key, version, correlation_id, body)
            payload = (key, version, codec.join(buffers))
            self.queue.append(("response", node_id, send.destination, payload))
        if effects.flush is not None:
            self.queue.append(("flushed", node_id, node_id, effects.flush))
        store = self.stores[node_id]
        if effects.snapshot is not None:
            store.on_snapshot(effects.snapshot)
        if effects.committed:
            store.on_committed(list(effects.committed))
        if effects.leader_change is not None:
            store.on_leader_change(effects.leader_change)
        self.deadlines[node_id] = effects.next_deadline_ms

    def deliver(self, kind: str, source: int, dest: int, payload: Any) -> None:
        codec, wire = self.codec, self.wire
        node = self.nodes[dest]
        self.collect(dest)
        if kind == "flushed":  # as the driver's AIO fsync: the segments' fds, then marked
            fds, done = node.log.begin_flush_fds(payload)
            self.fsync_and_close(fds)
            done()
            self.apply(dest, node.flushed(self.now, payload))
        elif kind == "request":
            header, body = codec.decode_request(memoryview(payload)[4:])
            key, version = header.request_api_key, header.request_api_version
            local = self.next_local
            self.next_local += 1
            request = wire.from_request(key, version, body, local)
            self.inbound[(dest, local)] = (key, version, header.correlation_id)
            self.apply(dest, node.receive(self.now, wire.request_source(request), request))
        else:
            key, version, frame = payload  # the requester knows what it sent
            correlation_id, body = codec.decode_response(key, version, memoryview(frame)[4:])
            if key == FETCH:
                wire.node_endpoints(body)  # as the driver learns the leader's endpoint
            response = wire.from_response(key, version, body, correlation_id)
            self.apply(dest, node.receive(self.now, source, response))

    def run(self, until: Any, limit_ms: int = 60_000) -> None:
        """Deliver everything, moving time to the next deadline when nothing is left, until
        `until()` holds."""
        end = self.now + limit_ms
        while not until():
            if self.queue:
                self.deliver(*self.queue.popleft())
                continue
            self.collect(None)
            if self.now > end:
                raise RuntimeError("the quorum did not get there in time")
            self.now = max(self.now + 1, min(self.deadlines.values()))
            for i, node in self.nodes.items():
                if self.deadlines[i] <= self.now:
                    self.collect(i)
                    self.apply(i, node.poll(self.now))
        self.collect(None)

    @property
    def leader(self) -> int | None:
        for i, node in self.nodes.items():
            if node.is_leader and self.stores[i].is_active():
                return i
        return None

    def all_applied(self, offset: int) -> bool:
        return all(s.applied >= offset for s in self.stores.values())


class _Driver:
    """What a RaftMetadataStore needs of its RaftDriver: the node, and append on the leader."""

    def __init__(self, quorum: Quorum, node_id: int, node: Any) -> None:
        self.quorum, self.node_id, self.node = quorum, node_id, node

    def append(self, records: Any) -> Any:
        result = self.node.append(records, self.quorum.now)
        self.quorum.apply(self.node_id, self.node.poll(self.quorum.now))
        return result


def creation_cost(measured: str, creations: int, warm: int, partitions: int, helper: str) -> str:
    """Run in the measured tree's Python under callgrind (counting off): set up the quorum,
    then count `measured`'s work over `creations`; prints the toggles made."""
    import random
    import uuid

    from gregor.controller.admin import Admin, TopicSpec
    from gregor.controller.local import LocalController
    from gregor.node.active_controller import ActiveControllerCore
    from gregor.protocol import api_keys
    from gregor.protocol.messages import BrokerHeartbeatRequest, BrokerRegistrationRequest

    toggle = ctypes.CDLL(helper).toggle
    if measured == "calibration":  # what a toggle pair costs: taken off the others' counts
        for _ in range(CALIBRATION):
            toggle()
            toggle()
        return f"toggles {2 * CALIBRATION}"
    with tempfile.TemporaryDirectory(prefix="gregor-commit-") as base:
        q = Quorum(base, toggle, measured)
        q.run(lambda: q.leader is not None)
        ctrl = q.leader
        assert ctrl is not None
        others = sorted(i for i in q.nodes if i != ctrl)
        measured_id = {"controller": ctrl, "follower-low": others[0], "follower-high": others[1]}
        store = q.stores[ctrl]
        controller = LocalController(store, ctrl, {}, rng=random.Random(0))
        core = ActiveControllerCore(ctrl, store, controller)
        core.poll(q.now)
        R = BrokerRegistrationRequest
        for b in (1, 2, 3):
            registration = R(
                broker_id=b, cluster_id=CLUSTER_ID, incarnation_id=uuid.UUID(int=b),
                listeners=[R.Listener(name="PLAINTEXT", host="h", port=9092, security_protocol=0)],
                features=[], rack=None, log_dirs=[uuid.UUID(int=9)],
            )  # fmt: skip
            answer = core.handle(api_keys.BROKER_REGISTRATION, 3, registration, q.now)
            q.run(lambda answer=answer: getattr(answer, "done", True))
            epoch = (answer.value if hasattr(answer, "value") else answer).broker_epoch
            beat = BrokerHeartbeatRequest(
                broker_id=b, broker_epoch=epoch, current_metadata_offset=store.applied,
                want_fence=False, want_shut_down=False, offline_log_dirs=[],
            )  # fmt: skip
            beat_answer = core.handle(api_keys.BROKER_HEARTBEAT, 1, beat, q.now)
            q.run(lambda beat_answer=beat_answer: getattr(beat_answer, "done", True))
        core.poll(q.now)  # activation
        q.run(lambda: q.all_applied(store.last_appended))
        admin = Admin(store, controller, [1, 2, 3], {}, 1)

        def create(name: str, counted: bool) -> None:
            """One creation, driven until the active controller has it committed (when it
            answers): the next one follows at once, and the other nodes learn of this commit
            with its records, as when creations follow each other."""
            if counted:
                q.collect(ctrl)
            (outcome,) = admin.create_topics([TopicSpec(name, partitions, 1)])
            assert not isinstance(outcome, Exception), outcome
            last = store.last_appended
            q.run(lambda: store.applied >= last)

        for i in range(warm):
            create(f"warm-{i}", False)
        q.measured_id, q.toggles = measured_id[measured], 0
        for i in range(creations):
            create(f"t-{i}", True)
        q.measured_id = None
        q.run(lambda: q.all_applied(store.last_appended))
        assert len(store.image.topics_by_id) == warm + creations
        for s in q.stores.values():
            assert len(s.image.topics_by_id) == warm + creations
    return f"toggles {q.toggles}"


def one_count(tree: str, measured: str, args: argparse.Namespace, helper: str) -> tuple[float, int]:
    """Instructions `measured` collected in `tree`, and how many toggles counting them took."""
    code = (
        f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); "
        "import gregor, metadata_commit_bench as b; "
        f"assert gregor.__file__.startswith({os.path.abspath(tree)!r}), gregor.__file__; "
        f"print(b.creation_cost({measured!r}, {args.creations}, {args.warm}, "
        f"{args.partitions}, {helper!r}))"
    )
    cmd = [
        "valgrind", "--tool=callgrind", "--collect-atstart=no", "--callgrind-out-file=/dev/null",
        sys.executable, "-c", code,
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=tree, PYTHONHASHSEED="0")
    out = subprocess.run(cmd, env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{tree} {measured}: failed\n{out.stderr[-3000:]}")
    found = _COLLECTED.search(out.stderr)
    toggles = re.search(r"toggles (\d+)", out.stdout)
    if found is None or toggles is None:
        raise SystemExit(f"{tree} {measured}: no count\n{out.stderr[-800:]}\n{out.stdout[-500:]}")
    return float(found.group(1)), int(toggles.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--tree", action="append", required=True, help="a source tree (repeat)")
    ap.add_argument("--role", action="append", choices=ROLES, help="(repeat; default: all)")
    ap.add_argument("--creations", type=int, default=200, help="creations counted")
    ap.add_argument("--warm", type=int, default=50, help="creations before counting")
    ap.add_argument("--partitions", type=int, default=1, help="partitions per topic")
    args = ap.parse_args()
    if not (shutil.which("valgrind") and shutil.which("gcc")):
        print("needs valgrind (with callgrind.h) and gcc")
        return 2
    with tempfile.TemporaryDirectory(prefix="gregor-commit-helper-") as tmp:
        src, helper = os.path.join(tmp, "toggle.c"), os.path.join(tmp, "toggle.so")
        with open(src, "w") as f:
            f.write(_HELPER)
        subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", helper, src], check=True)
        pair = {}
        for tree in args.tree:  # a toggle pair's cost, from a run of nothing else
            collected, toggles = one_count(tree, "calibration", args, helper)
            pair[tree] = 2 * collected / toggles
        print(f"{args.creations} creations counted per node, {args.partitions} partition(s) each")
        for role in args.role or ROLES:
            for tree in args.tree:
                collected, toggles = one_count(tree, role, args, helper)
                net = (collected - pair[tree] * toggles / 2) / args.creations
                print(
                    f"{role:13} {tree}: {net / 1e3:7.1f} K instructions per creation "
                    f"({toggles / args.creations:.1f} toggles a creation, "
                    f"{pair[tree]:.0f} a pair, taken off)",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
