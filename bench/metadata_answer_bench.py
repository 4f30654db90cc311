#!/usr/bin/env python
"""What a Metadata answer for all topics costs one node at 10,000 partitions, in process, source
trees side by side: the handler (its topics and partitions built) and the encoding of the
response (`codec.encode_response`), without sockets.

    python bench/metadata_answer_bench.py --tree /tmp/old --tree .              # wall ms, 3 runs
    python bench/metadata_answer_bench.py --tree /tmp/old --tree . --counted    # callgrind
    python bench/metadata_answer_bench.py --tree . --profile                    # cProfile, top 25

A node (`BrokerServer` built but not listening, one voter, data in a temp dir) hosts the
`--layout`: "100x100" is 100 topics of 100 partitions, "1x10000" one topic of 10,000 (made
5,000 by CreateTopics, then grown by CreatePartitions, as the controller caps an operation at
10,000 records). For each version of `--versions` (12, 9, 1: the newest, the first flexible, a
non-flexible one), `--answers` Metadata requests for all topics (null topics; v0 would be an
empty list) are answered after `--warm-up` answers: ms per answer (median of the answers,
and the worst), split into the handler and the encoding. The trees' child processes alternate,
`--runs` times.

`--counted`: the instructions valgrind's callgrind counts in one child per tree while it is
switched on (`callgrind_control -i`) around `--answers` answers of each version after the
warm-up, per answer: figures no load on the machine bends. `--profile`: cProfile of this tree's
answers. `--gc`: each answer's time with the garbage collector's collections counted (how many
answers saw one of each generation). `--cold`: before each answer, drop what a tree keeps of
the answers before (handlers/metadata_partitions.py), as after every topic changed: the cost
of writing every partition. `--changed N`: before each answer, N partitions spread over the
topics get their ISR set again (as an AlterPartition answer sets it): what an answer costs
after a few changes. Figures only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from tree_child import inner_instructions  # noqa: E402

GROW_STEP = 5_000  # partitions per CreateTopics / CreatePartitions (the controller's cap)


def build_node(data_dir: str, layout: str) -> Any:
    """A one-voter BrokerServer in `data_dir` hosting `layout` ("TxP": T topics of P)."""
    from gregor.broker.broker import BrokerServer
    from gregor.broker.config import BrokerConfig
    from gregor.controller.admin import TopicSpec

    b = BrokerServer(BrokerConfig.load(None, {"log.dirs": data_dir}))
    b.logs.startup()
    b.services.apply_metadata()
    topics, partitions = (int(x) for x in layout.split("x"))
    for t in range(topics):
        name = f"t{t}"
        b.admin.create_topic(TopicSpec(name, min(partitions, GROW_STEP), 1))
        b.services.apply_metadata()
        count = min(partitions, GROW_STEP)
        while count < partitions:
            count = min(partitions, count + GROW_STEP)
            (error,) = b.admin.create_partitions([(name, count, None)])
            assert error is None, error
            b.services.apply_metadata()
    hosted = len(b.replicas.partitions)
    assert hosted == topics * partitions, hosted
    return b


class Answers:
    """Metadata requests for all topics at `version`, answered and encoded as on the wire."""

    def __init__(self, b: Any, version: int, changed: int = 0) -> None:
        from gregor.handlers import metadata
        from gregor.handlers.context import RequestContext
        from gregor.protocol import api_keys, codec
        from gregor.protocol.headers import RequestHeader
        from gregor.protocol.messages import MetadataRequest

        self.version = version
        self.handle, self.encode, self.key = (
            metadata.handle,
            codec.encode_response,
            api_keys.METADATA,
        )
        header = RequestHeader(api_keys.METADATA, version, 1, "bench")
        self.ctx = RequestContext(b.services, header, "127.0.0.1:1")
        topics = [] if version == 0 else None
        every = list(b.replicas.partitions.values())
        self.touched = every[:: max(1, len(every) // changed)][:changed] if changed else []
        self.request = MetadataRequest(topics=topics, allow_auto_topic_creation=False)

    def handler(self) -> Any:
        return self.handle(self.ctx, self.request)

    def forget(self) -> None:
        """Drop what a tree keeps of earlier answers, if anything (`--cold`)."""
        kept = getattr(self.ctx.services, "partition_arrays", None)
        if kept is not None:
            kept._kept.clear()

    def once(self, cold: bool = False) -> tuple[float, float, int]:
        if cold:
            self.forget()
        for p in self.touched:  # their ISR set again (as an AlterPartition answer sets it)
            p.isr = list(p.isr)
        t0 = time.perf_counter()
        response = self.handle(self.ctx, self.request)
        t1 = time.perf_counter()
        buffers = self.encode(self.key, self.version, 1, response)
        t2 = time.perf_counter()
        return t1 - t0, t2 - t1, sum(len(x) for x in buffers)


def timed(
    layout: str,
    versions: str,
    answers: int,
    warm_up: int,
    count_gc: bool,
    cold: bool = False,
    changed: int = 0,
) -> str:
    """Run in the tree on sys.path: JSON {version: {handler_ms, encode_ms, total_ms, ...}}."""
    out: dict[str, Any] = {}
    with _node(layout) as b:
        for v in (int(x) for x in versions.split(",")):
            run = _warmed(b, v, changed, warm_up)
            seen = {0: 0, 1: 0, 2: 0}
            handler, encode, total = [], [], []
            size = 0
            for _ in range(answers):
                before = [s["collections"] for s in gc.get_stats()]
                h, e, size = run.once(cold)
                after = [s["collections"] for s in gc.get_stats()]
                for gen in range(3):
                    seen[gen] += after[gen] != before[gen]
                handler.append(h * 1e3)
                encode.append(e * 1e3)
                total.append((h + e) * 1e3)
            out[str(v)] = {
                "handler_ms": statistics.median(handler),
                "encode_ms": statistics.median(encode),
                "total_ms": statistics.median(total),
                "max_ms": max(total),
                "bytes": size,
                **({"gc_answers": seen} if count_gc else {}),
            }
    return json.dumps(out)


@contextlib.contextmanager
def _node(layout: str) -> Iterator[Any]:
    """`build_node` in a temporary directory, collected once before the answers."""
    with tempfile.TemporaryDirectory(prefix="gregor-mdanswer-") as d:
        b = build_node(d, layout)
        gc.collect()
        try:
            yield b
        finally:
            b.logs.shutdown()


def _warmed(b: Any, version: int, changed: int, warm_up: int) -> Answers:
    run = Answers(b, version, changed)
    for _ in range(warm_up):
        run.once()
    return run


def _counted(
    layout: str, versions: str, answers: int, warm_up: int, cold: bool, changed: int
) -> None:
    """Under callgrind (`--instr-atstart=no`): prints per version the answers counted."""
    with _node(layout) as b:
        # one version per child (the first): the totals are of all that was counted
        run = _warmed(b, int(versions.split(",")[0]), changed, warm_up)
        subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=False)
        for _ in range(answers):
            run.once(cold)
        subprocess.run(["callgrind_control", "-i", "off", str(os.getpid())], check=False)


def _child_timed(tree: str, args: argparse.Namespace) -> dict[str, Any]:
    code = (
        f"import sys; sys.path.insert(0, {HERE!r}); import gregor, metadata_answer_bench as m; "
        f"assert gregor.__file__.startswith({os.path.abspath(tree)!r}), gregor.__file__; "
        f"print(m.timed({args.layout!r}, {args.versions!r}, {args.answers}, {args.warm_up}, "
        f"{args.gc}, {args.cold}, {args.changed}))"
    )
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tempfile.gettempdir(),
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{tree}: failed\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def profile(args: argparse.Namespace) -> None:
    import cProfile
    import pstats

    with tempfile.TemporaryDirectory(prefix="gregor-mdanswer-") as d:
        b = build_node(d, args.layout)
        for v in (int(x) for x in args.versions.split(",")):
            run = Answers(b, v, args.changed)
            for _ in range(args.warm_up):
                run.once()
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(args.answers):
                run.once(args.cold)
            prof.disable()
            print(f"--- v{v}, {args.answers} answers ({args.layout})")
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        b.logs.shutdown()


def main() -> int:
    if len(sys.argv) == 8 and sys.argv[1] == "--inner":
        a = sys.argv
        _counted(a[2], a[3], int(a[4]), int(a[5]), a[6] == "1", int(a[7]))
        return 0
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--tree", action="append", default=[], help="a source tree (repeat)")
    ap.add_argument("--layout", default="100x100", help='"TxP": T topics of P partitions')
    ap.add_argument("--versions", default="12,9,1")
    ap.add_argument("--answers", type=int, default=30)
    ap.add_argument("--warm-up", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--counted", action="store_true", help="callgrind instructions per answer")
    ap.add_argument("--profile", action="store_true", help="cProfile this tree's answers")
    ap.add_argument("--gc", action="store_true", help="count the collections answers saw")
    ap.add_argument("--cold", action="store_true", help="drop what was kept before each answer")
    ap.add_argument("--changed", type=int, default=0, help="partitions changed before each")
    args = ap.parse_args()
    trees = args.tree or ["."]
    if args.profile:
        sys.path.insert(0, os.path.abspath(trees[0]))
        profile(args)
        return 0
    if args.counted:
        if not shutil.which("callgrind_control"):
            print("--counted needs valgrind (apt-get install valgrind)")
            return 2
        for v in args.versions.split(","):
            for tree in trees:
                inner = [args.layout, v, str(args.answers), str(args.warm_up)]
                inner += [str(int(args.cold)), str(args.changed)]
                with tempfile.TemporaryDirectory() as tmp:
                    total = inner_instructions(os.path.abspath(tree), __file__, inner, tmp)
                if isinstance(total, str):
                    print(f"{tree}: failed\n{total}")
                    return 1
                per = total / args.answers
                print(f"{args.layout} v{v} {tree}: {per / 1e6:,.2f} M instructions per answer")
        return 0
    print(f"load before: {os.getloadavg()[0]:.2f}")
    results: dict[str, list[dict[str, Any]]] = {t: [] for t in trees}
    for _ in range(args.runs):
        for tree in trees:
            results[tree].append(_child_timed(tree, args))
    for v in args.versions.split(","):
        for tree, runs in results.items():
            rows = [r[v] for r in runs]

            def med(key: str, rows: list[dict[str, Any]] = rows) -> float:
                return statistics.median(r[key] for r in rows)

            gcs = f" gc answers {[r['gc_answers'] for r in rows]}" if args.gc else ""
            print(
                f"{args.layout} v{v} {tree}: {med('total_ms'):.2f} ms per answer "
                f"(handler {med('handler_ms'):.2f}, encode {med('encode_ms'):.2f}; "
                f"worst {max(r['max_ms'] for r in rows):.2f}; {rows[0]['bytes']:,} B){gcs}"
            )
    print(f"load after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
