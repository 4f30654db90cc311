#!/usr/bin/env python
"""Whether two source trees write the same metadata records and give the same answers for the
same CreateTopics requests: a check to run beside controller_create_bench.py when the
creation path changes.

    python bench/controller_create_records_check.py --tree /tmp/old --tree $PWD

Each tree, in its own Python, drives Admin.create_topics on the active controller of a
one-voter quorum polled by hand (as controller_create_bench.py does) with deterministic topic
ids and placement: valid topics (counts, replication factors, configs, manual assignments,
several per request) and every refusal the rules know (an existing or colliding name, an
illegal or reserved one, bad counts, configs and assignments, a request over the partition
bound), each request once with validate_only and once without. It prints a digest of every
metadata log entry's bytes and one of the answers (error codes, messages, replicas, ids); the
trees agree when both digests match. Exits 1 when they differ.
"""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
import uuid
from typing import Any

_SPECS: list[list[tuple[Any, ...]]] = [
    [("a", 3, 2)],
    [("b", 6, 3, None, {"retention.ms": "1000", "cleanup.policy": "compact", "x.y": None})],
    [("c", -1, -1, {0: [3, 1], 1: [2, 3]})],
    [("d", 1, 4)],
    [("a", 1, 1)],
    [("e.f", 2, 1), ("e_f", 2, 1), ("g", 0, 1), ("h", 2, 0)],
    [("i", 1, 1, None, {"retention.ms": "nope"})],
    [("j", -1, -1, {0: [1, 9]})],
    [("k", -1, -1, {0: [1], 2: [2]})],
    [("__cluster_metadata", 1, 1)],
    [("bad/name", 1, 1)],
    [("l", 3, 1, None, {"no.such": "1"})],
    [("m", 20_000, 1)],
    [(f"n{i}", 1, 1) for i in range(5)],
    [("o", -1, -1, {0: [1, 1]})],
    [("p", 2, 1, {0: [1]})],
]


def _inner() -> None:
    """In the tree measured (its gregor first on sys.path): the digests."""
    import gregor

    assert gregor.__file__.startswith(os.getcwd()), f"{gregor.__file__}: not the tree checked"
    from controller_rig import admin_over_one_voter

    from gregor.controller.admin import TopicSpec

    ids = iter(range(1, 1 << 20))
    admin, _store, log, run = admin_over_one_voter(
        new_uuid=lambda: uuid.UUID(int=next(ids) << 64 | 0xABCDEF), rng=random.Random(7)
    )
    answers = []
    for request in _SPECS:
        specs = [TopicSpec(*spec) for spec in request]
        for validate_only in (True, False):
            for o in admin.create_topics(specs, validate_only=validate_only):
                answers.append(
                    (type(o).__name__, getattr(o, "code", None), getattr(o, "message", None))
                    + (getattr(o, "replicas", None), str(getattr(o, "topic_id", "")))
                )
            run()
    entries = hashlib.sha256()
    count = 0
    for batch in log.batches:
        for record in batch.records:
            entries.update(bytes(record))
            count += 1
    answered = hashlib.sha256(repr(answers).encode()).hexdigest()[:16]
    print(f"{count} entries {entries.hexdigest()[:16]} answers {answered}")


def main() -> None:
    if sys.argv[1:] == ["--inner"]:
        _inner()
        return
    trees = [os.path.abspath(t) for t in sys.argv[2::2] if t] if "--tree" in sys.argv else []
    if len(trees) < 2:
        raise SystemExit("usage: controller_create_records_check.py --tree OLD --tree NEW")
    lines = []
    for tree in trees:
        out = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--inner"],
            cwd=tree, env={**os.environ, "PYTHONPATH": tree},
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if out.returncode != 0:
            raise SystemExit(f"{tree}:\n{out.stderr[-3000:]}")
        lines.append(out.stdout.strip().splitlines()[-1])
        print(f"{tree}: {lines[-1]}")
    same = len(set(lines)) == 1
    print("same records and answers" if same else "the trees DIFFER")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
