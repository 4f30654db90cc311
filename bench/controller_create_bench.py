#!/usr/bin/env python
"""Instructions the active controller's own code spends on one topic creation, in process and
without I/O, counted by valgrind's callgrind: the part of `metadata_chain_bench.py`'s
controller figure that is the CreateTopics path itself (Admin -> LocalController ->
QuorumController -> the store's framing and append -> the replay of the committed records into
the image and the store's topics), without the network, the Raft Fetches of the other voters
and the event loop that make up the rest of that figure and its run-to-run spread.

    python bench/controller_create_bench.py --tree /tmp/old --tree $PWD

For each tree in turn (`--runs` times, alternating), a Python of that tree runs under
`valgrind --tool=callgrind` with counting off: a networked metadata store over a one-voter
KRaft node polled by hand (what tests/node/test_active_controller.py drives), three brokers
registered and unfenced through the controller's own request handling, `--warm` topics created
(not counted), then counting on for `--topics` creations by `Admin.create_topics` (one topic
each, `--partitions` partitions, replication factor 1, each committed and replayed before the
next), counting off. Figures only: instructions per creation. The count moves by well under
1% from run to run (no threads, no timers, no network).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any

from tree_child import inner_instructions


def _inner(topics: int, warm: int, partitions: int) -> None:
    """Run under callgrind, with the tree's gregor first on sys.path."""
    import gregor

    assert gregor.__file__.startswith(os.getcwd()), f"{gregor.__file__}: not the tree measured"
    from controller_rig import admin_over_one_voter

    from gregor.controller.admin import TopicSpec

    admin, store, _log, run = admin_over_one_voter()

    def create(name: str) -> None:
        (outcome,) = admin.create_topics([TopicSpec(name, partitions, 1)])
        assert not isinstance(outcome, Exception), outcome
        run()

    for i in range(warm):
        create(f"warm-{i}")
    pid = str(os.getpid())
    subprocess.run(["callgrind_control", "-i", "on", pid], capture_output=True, check=False)
    for i in range(topics):
        create(f"t-{i}")
    subprocess.run(["callgrind_control", "-i", "off", pid], capture_output=True, check=False)
    assert len(store.image.topics_by_id) == warm + topics


def one_run(tree: Any, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gregor-create-", dir=args.dir) as tmp:
        total = inner_instructions(
            tree.path, __file__, [str(args.topics), str(args.warm), str(args.partitions)], tmp
        )
    if isinstance(total, str):
        return {"error": total}
    return {"controller_k": round(total / args.topics / 1e3, 1)}


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--inner":
        _inner(*(int(a) for a in sys.argv[2:]))
        return
    # imported here: scale_common puts this checkout first on sys.path, and the inner run
    # must import the measured tree's gregor
    from scale_common import Figure, Report, add_common_args, alternate, runs_of, trees_of

    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(ap, runs=2)
    ap.add_argument("--topics", type=int, default=300, help="creations counted")
    ap.add_argument("--warm", type=int, default=200, help="creations before counting")
    ap.add_argument("--partitions", type=int, default=1, help="partitions per topic")
    args = ap.parse_args()
    if not (shutil.which("valgrind") and shutil.which("callgrind_control")):
        raise SystemExit("needs valgrind (apt-get install valgrind)")
    if args.quick:
        args.topics, args.warm = 30, 20
    trees = trees_of(args)
    report = Report("controller-create", args, trees)
    alternate(report, trees, runs_of(args, default=2), "create", lambda t: one_run(t, args))
    report.write(
        "The active controller's CreateTopics path in process (bench/controller_create_bench.py)",
        (__doc__ or "").split("\n\n")[0],
        [Figure("create", "controller_k", "CreateTopics path, K instructions per topic")],
        [],
    )


if __name__ == "__main__":
    main()
