"""`free_ports`: loopback ports for test nodes that must keep their port across restarts."""

from __future__ import annotations

import os
import random
import socket

# Below the kernel's ephemeral range (Linux: 32768-60999), so an outgoing connection can never
# take a port between the moment it is picked and the moment a node (re)binds it; pytest-xdist
# workers each draw from their own slice.
_PORT_LOW, _PORT_HIGH = 20000, 32760


def _port_range() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or workers < 2:
        return range(_PORT_LOW, _PORT_HIGH)
    index, width = int(worker[2:]) % workers, (_PORT_HIGH - _PORT_LOW) // workers
    return range(_PORT_LOW + index * width, _PORT_LOW + (index + 1) * width)


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Distinct ports free on `host` now, drawn at random outside the ephemeral range (so
    a port a stopped node held stays its own to rebind), all held until every one is picked."""
    socks: list[socket.socket] = []
    candidates = _port_range()
    try:
        while len(socks) < count:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind((host, random.choice(candidates)))
            except OSError:
                s.close()
                continue
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
