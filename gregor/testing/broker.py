"""`Broker`: a real gregor broker in a child process, on a port it picks, in a temp dir.

    with gregor.Broker() as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})

A child process rather than a thread: the broker runs its own event loop (uvloop) and signal
handling, your test keeps its own, and a test can SIGKILL it to prove durability. `restart()`
brings it back on the same port with the same data; `kill()` is SIGKILL; `stop()` (also on
leaving the `with` block) is SIGTERM, a clean shutdown. `port` is the first client listener's
(`--listen`); with several in `listeners`, `listener_ports` names each one's port by name.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from gregor.clock import SYSTEM_CLOCK
from gregor.testing import parent_death
from gregor.testing.managed import Managed
from gregor.testing.ports import free_ports


class BrokerStartError(RuntimeError):
    pass


class Broker(Managed):
    def __init__(
        self,
        config: dict[str, str] | None = None,
        *,
        data_dir: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        log_level: str = "WARNING",
        start_timeout_s: float = 30.0,
        client_listener: bool = True,
        die_with_parent: bool = False,
    ) -> None:
        self.config = dict(config or {})
        # False for a controller-only node: no --listen; host:port is then its controller listener
        self.client_listener = client_listener
        # SIGTERM (a clean stop) for the node when the process that started it dies, even by
        # SIGKILL: `gregor cluster up` leaves nothing running
        self.die_with_parent = die_with_parent
        self.data_dir = self._directory(data_dir, "gregor-")
        self.host = host
        # port 0: one picked here, outside the ephemeral range, so a restart can rebind it
        self._pick_port = port == 0 and client_listener
        self.port = port
        # the port of each client listener by name, once started (several client listeners)
        self.listener_ports: dict[str, int] = {}
        self.log_level = log_level
        self.start_timeout_s = start_timeout_s
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = os.path.join(self.data_dir, "broker.log")

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> Broker:
        if self.process is not None and self.process.poll() is None:
            return self
        if not self._pick_port:
            return self._start()
        for attempt in range(3):
            if self.port == 0 or attempt:
                self.port = free_ports(1, self.host)[0]
            try:
                return self._start()
            except BrokerStartError as e:
                if "already in use" not in str(e) or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _start(self) -> Broker:
        ready = os.path.join(self.data_dir, "ready")
        for stale in (ready, ready + ".metrics"):
            if os.path.exists(stale):
                os.unlink(stale)
        cmd = [
            sys.executable,
            "-m",
            "gregor",
            "serve",
            *(["--listen", f"{self.host}:{self.port}"] if self.client_listener else []),
            "--data-dir",
            os.path.join(self.data_dir, "logs"),
            "--ready-file",
            ready,
            "--log-level",
            self.log_level,
        ]
        for key, value in self.config.items():
            cmd += ["--set", f"{key}={value}"]
        log = open(self.log_path, "ab")
        arm = parent_death.preexec_fn(signal.SIGTERM) if self.die_with_parent else None
        self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, preexec_fn=arm)
        log.close()
        deadline = SYSTEM_CLOCK.monotonic_s() + self.start_timeout_s
        while not os.path.exists(ready):
            if self.process.poll() is not None:
                raise BrokerStartError(
                    f"broker exited with {self.process.returncode}:\n{self.read_log()}"
                )
            if SYSTEM_CLOCK.monotonic_s() > deadline:
                self.kill()
                raise BrokerStartError(
                    f"broker did not start in {self.start_timeout_s}s:\n{self.read_log()}"
                )
            SYSTEM_CLOCK.sleep(0.02)
        with open(ready) as f:
            first, *listeners = f.read().split()
        self.port = int(first.rpartition(":")[2])
        # a node with several client listeners: NAME://host:port of each
        for line in listeners:
            name, _, address = line.partition("://")
            self.listener_ports[name] = int(address.rpartition(":")[2])
        return self

    @property
    def metrics_url(self) -> str | None:
        """`http://HOST:PORT` of the node's metrics listener (`metrics.listener`), once it
        listens; None without one."""
        try:
            with open(os.path.join(self.data_dir, "ready.metrics")) as f:
                return f.read().strip() or None
        except FileNotFoundError:
            return None

    def read_log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM and wait: the broker finishes in-flight requests and shuts down cleanly."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        code = self.process.returncode
        self.process = None
        return code

    def kill(self) -> None:
        """SIGKILL: no shutdown at all, as a crash."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGKILL)
            self.process.wait()
            self.process = None

    def restart(self, *, clean: bool = True) -> Broker:
        """Stop (cleanly, or by SIGKILL with clean=False) and start again on the same port."""
        if clean:
            self.stop()
        else:
            self.kill()
        return self.start()
