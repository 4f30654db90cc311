#!/usr/bin/env python
"""One `gregor serve` from each of two source trees, side by side in one run: produce then consume
1,000,000 records of 100 B into one partition with confluent-kafka (bench/kclient.py), the
trees alternating, 3 runs each. For checking that a change costs the single-node path nothing.

    git archive <old-commit> | tar -x -C /tmp/old
    python bench/compare_trees.py /tmp/old .

Prints each run's records/s and the load average before and after. Figures only.
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
K = os.path.join(HERE, "kclient.py")
CLIENT_PATH = os.path.dirname(HERE)


def port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def run(tree, size, count):
    d = tempfile.mkdtemp()
    p = port()
    env = dict(os.environ, PYTHONPATH=tree)
    srv = subprocess.Popen(
        [sys.executable, "-m", "gregor", "serve", "--listen", f"127.0.0.1:{p}", "--data-dir", d],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tree,  # `-m` puts the working directory first on sys.path, before PYTHONPATH
    )
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", p), 0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    b = f"127.0.0.1:{p}"
    out = {}
    cenv = dict(os.environ, PYTHONPATH=CLIENT_PATH)
    subprocess.run(
        [sys.executable, K, "create", "--bootstrap", b, "--topic", "t", "--partitions", "1"],
        env=cenv,
        capture_output=True,
    )
    r = subprocess.run(
        [
            sys.executable,
            K,
            "produce",
            "--bootstrap",
            b,
            "--topic",
            "t",
            "--partitions",
            "1",
            "--size",
            str(size),
            "--count",
            str(count),
        ],
        env=cenv,
        capture_output=True,
        text=True,
    )
    out["produce"] = json.loads(r.stdout.strip().splitlines()[-1])
    r = subprocess.run(
        [
            sys.executable,
            K,
            "consume",
            "--bootstrap",
            b,
            "--topic",
            "t",
            "--partitions",
            "1",
            "--count",
            str(count),
        ],
        env=cenv,
        capture_output=True,
        text=True,
    )
    out["consume"] = json.loads(r.stdout.strip().splitlines()[-1])
    srv.terminate()
    srv.wait(20)
    return out


if len(sys.argv) != 3 or not all(os.path.isdir(a) for a in sys.argv[1:3]):
    sys.exit(__doc__)
OLD, NEW = (os.path.abspath(a) for a in sys.argv[1:3])
res = {"old": [], "new": []}
print("load", os.getloadavg())
for _run in range(3):
    for name, tree in (("old", OLD), ("new", NEW)):
        o = run(tree, 100, 1000000)
        res[name].append(o)
        print(
            name,
            {
                k: {
                    kk: v
                    for kk, v in o[k].items()
                    if "per_s" in kk or kk in ("records_per_s", "mb_per_s")
                }
                for k in o
            },
            flush=True,
        )
print("load", os.getloadavg())
