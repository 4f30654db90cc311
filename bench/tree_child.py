"""One figure from a Python of another source tree: the benches that compare trees side by side
in one run measure each tree in a child process whose `gregor` is that tree's.

    figure_in_tree("/tmp/old", "leader_cycle_bench", "cycle_cost(3000, 500)", instructions=False)

The child imports `module` from this directory, checks that its `gregor` is the tree's, and
prints `module.<call>`: that last line is the figure. With `instructions`, it runs under
valgrind's callgrind and the figure is the instructions callgrind collected instead. It runs
from the temporary directory, not from a tree's (whose `gregor` would come first otherwise).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
_COLLECTED = re.compile(r"Collected : (\d+)")


def figure_in_tree(
    tree: str, module: str, call: str, instructions: bool, hash_seed: str | None = None
) -> float:
    env = dict(os.environ, PYTHONPATH=tree)
    if hash_seed is not None:  # the same dicts and sets in every run
        env["PYTHONHASHSEED"] = hash_seed
    code = (
        f"import sys; sys.path.insert(0, {HERE!r}); "
        f"import gregor, {module} as b; "
        f"assert gregor.__file__.startswith({os.path.abspath(tree)!r}), gregor.__file__; "
        f"print(b.{call})"
    )
    cmd = [sys.executable, "-c", code]
    if instructions:
        cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd]
    out = subprocess.run(cmd, env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{tree}: {module}.{call} failed\n{out.stderr[-3000:]}")
    if not instructions:
        return float(out.stdout.strip().splitlines()[-1])
    found = _COLLECTED.search(out.stderr)
    if found is None:
        raise SystemExit(f"{tree}: no instruction count from callgrind\n{out.stderr[-500:]}")
    return float(found.group(1))


_TOTALS = re.compile(r"^totals: (\d+)", re.M)


def inner_instructions(tree: str, script: str, inner_args: list[str], tmp: str) -> int | str:
    """Instructions of `script --inner *inner_args` run under callgrind with PYTHONPATH and the
    working directory `tree` (the script switches counting on for what it measures:
    `--instr-atstart=no`); or the error, as text."""
    out = os.path.join(tmp, "callgrind.out")
    cmd = [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
        sys.executable, os.path.abspath(script), "--inner", *inner_args,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": tree}
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        return done.stderr[-2000:]
    with open(out) as f:
        found = _TOTALS.search(f.read())
    return int(found.group(1)) if found is not None else "no totals in the callgrind output"
