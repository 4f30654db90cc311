#!/usr/bin/env python
"""Instructions a server connection (runtime/connection.py) spends per request and answer, in
process, counted by valgrind's callgrind: the connection layer of the active controller's
figure in `metadata_chain_bench.py`, without the Raft timing (linger timers, Fetches answered
early or late, leadership) that makes that bench's per-node figure move on a busy machine.

    python bench/connection_cycle_bench.py --tree /tmp/old --tree $PWD

For each tree in turn (`--runs` times, alternating), a Python of that tree runs under
`valgrind --tool=callgrind` with counting off: a uvloop loop, a TCP connection over loopback, a `Connection`
over one end whose dispatcher answers each request frame with a three-buffer answer, half of
them at once and half through a `Later` completed at the next turn of the loop (as a parked
Fetch or a CreateTopics waiting for its commit is), and a client on the other end that sends
a frame and reads its answer, one at a time. `--warm` cycles, then counting on for `--cycles`,
counting off. The client's few lines are the same in every tree. Figures only: instructions
per cycle; they move by well under 1% from run to run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from typing import Any

from tree_child import inner_instructions


def _inner(cycles: int, warm: int) -> None:
    """Run under callgrind, with the tree's gregor first on sys.path."""
    import asyncio
    import socket

    import gregor

    assert gregor.__file__.startswith(os.getcwd()), f"{gregor.__file__}: not the tree measured"
    from gregor.runtime.connection import Connection, Later

    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    answer = [bytearray(struct.pack(">ii", 60, 0)), b"x" * 40, b"y" * 16]
    request = struct.pack(">i", 40) + b"r" * 40

    async def main() -> None:
        loop = asyncio.get_running_loop()
        listener = socket.create_server(("127.0.0.1", 0))
        client = socket.create_connection(listener.getsockname())
        server_sock, _ = listener.accept()
        listener.close()
        client.setblocking(False)
        count = [0]

        def dispatch(conn: Any, frame: memoryview) -> Any:
            count[0] += 1
            if count[0] % 2:
                return list(answer)
            later = Later()
            loop.call_soon(later.set_result, list(answer))
            return later

        conn = Connection(
            server_sock, loop, dispatch, max_request_bytes=1 << 20, max_queued_requests=500,
            on_close=lambda c: None, now_ms=lambda: 0,
        )  # fmt: skip
        conn.start()
        done: asyncio.Future[None] = loop.create_future()
        left = [warm + cycles]
        got = [0]

        def readable() -> None:
            got[0] += len(client.recv(4096))
            if got[0] < 64:
                return
            got[0] = 0
            left[0] -= 1
            if left[0] == cycles:
                subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=False)
            if left[0] == 0:
                done.set_result(None)
                return
            client.send(request)

        loop.add_reader(client.fileno(), readable)
        client.send(request)
        await done
        subprocess.run(["callgrind_control", "-i", "off", str(os.getpid())], check=False)
        loop.remove_reader(client.fileno())
        conn.close(None)
        client.close()

    asyncio.run(main())


def one_run(tree: Any, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gregor-conn-", dir=args.dir) as tmp:
        total = inner_instructions(tree.path, __file__, [str(args.cycles), str(args.warm)], tmp)
    if isinstance(total, str):
        return {"error": total}
    return {"cycle_k": round(total / args.cycles / 1e3, 2)}


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--inner":
        _inner(int(sys.argv[2]), int(sys.argv[3]))
        return
    from scale_common import Figure, Report, add_common_args, alternate, runs_of, trees_of

    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(ap, runs=1)
    ap.add_argument("--cycles", type=int, default=2000, help="request/answer cycles counted")
    ap.add_argument("--warm", type=int, default=500, help="cycles before counting")
    args = ap.parse_args()
    if not (shutil.which("valgrind") and shutil.which("callgrind_control")):
        raise SystemExit("needs valgrind (apt-get install valgrind)")
    if args.quick:
        args.cycles, args.warm = 200, 50
    trees = trees_of(args)
    report = Report("connection-cycle", args, trees)
    alternate(report, trees, runs_of(args, default=1), "cycle", lambda t: one_run(t, args))
    report.write(
        "A server connection's request/answer cycle in process (bench/connection_cycle_bench.py)",
        (__doc__ or "").split("\n\n")[0],
        [Figure("cycle", "cycle_k", "connection cycle, K instructions (client's included)")],
        [],
    )


if __name__ == "__main__":
    main()
