"""The cost of one authorization check with 10,000 ACLs, in nanoseconds.

    python bench/authorizer_bench.py [--acls 10000] [--checks 200000]

The ACL set mixes literal and prefixed topic and group ACLs for 500 principals (with a few
wildcard-name ones); the checks ask random (principal, operation, resource) triples, so some
hit ACLs and most fall to the default. `decide` is the check without the memo (every call walks
the index), `authorize` the memoised one the broker calls (after a first pass fills the memo).
"""

from __future__ import annotations

import argparse
import random
import time

from gregor.security.acls import (
    ALLOW,
    DENY,
    DESCRIBE,
    GROUP,
    LITERAL,
    PREFIXED,
    READ,
    TOPIC,
    WRITE,
    AclBinding,
)
from gregor.security.authorizer import Authorizer


def make_acls(n: int, rng: random.Random) -> list[AclBinding]:
    out = []
    for i in range(n):
        rtype = TOPIC if i % 4 else GROUP
        pattern = PREFIXED if i % 5 == 0 else LITERAL
        name = f"team{i % 97}-svc{i}" if pattern == LITERAL else f"team{i % 97}-"
        principal = f"User:u{rng.randrange(500)}"
        op = rng.choice((READ, WRITE, DESCRIBE))
        perm = DENY if i % 50 == 0 else ALLOW
        out.append(AclBinding(rtype, name, pattern, principal, "*", op, perm))
    out.append(AclBinding(TOPIC, "*", LITERAL, "User:*", "*", DESCRIBE, ALLOW))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--acls", type=int, default=10_000)
    ap.add_argument("--checks", type=int, default=200_000)
    args = ap.parse_args()
    rng = random.Random(7)
    acls = make_acls(args.acls, rng)
    started = time.perf_counter()
    authz = Authorizer(acls, super_users={"User:admin"})
    build_ms = (time.perf_counter() - started) * 1000
    queries = [
        (
            f"User:u{rng.randrange(500)}",
            "10.0.0.1",
            rng.choice((READ, WRITE, DESCRIBE)),
            TOPIC if rng.random() < 0.75 else GROUP,
            f"team{rng.randrange(97)}-svc{rng.randrange(args.acls)}",
        )
        for _ in range(2000)
    ]
    rounds = max(1, args.checks // len(queries))
    for label, fn in (("decide (no memo)", authz.decide), ("authorize (memo)", authz.authorize)):
        for q in queries:  # warm up (fills the memo for `authorize`)
            fn(*q)
        started = time.perf_counter_ns()
        for _ in range(rounds):
            for q in queries:
                fn(*q)
        per = (time.perf_counter_ns() - started) / (rounds * len(queries))
        print(f"{label}: {per:.0f} ns per check ({len(acls)} ACLs)")
    print(f"index built in {build_ms:.1f} ms")


if __name__ == "__main__":
    main()
