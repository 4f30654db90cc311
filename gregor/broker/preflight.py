"""What `gregor serve` checks before a node starts, so that a mistake the user can fix is one
line naming the option to change, not a traceback from deep in the start:

    check_listen_address("127.0.0.1:99999", "--listen")    HOST:PORT, port 0-65535
    check_log_dirs(["/data"], "--data-dir")                 each a directory (made if missing)
                                                            this user can write to
    check_ports_free(config, "--listen HOST:PORT")          nothing else listens on a client
                                                            or the controller listener's port,
                                                            or the console's or the metrics'

Each raises StartError, one line naming where the value came from (a flag, or the config key). The port check binds and closes at once: a port taken between the check and the
start still fails there (serve reports that OSError in one line too).
"""

from __future__ import annotations

import errno
import os
import tempfile

from gregor.broker.config import MAX_PORT, BrokerConfig
from gregor.runtime.metrics_listener import parse_listener as parse_http_listener
from gregor.runtime.server import bind

EXAMPLE_LISTEN = "127.0.0.1:9092"


class StartError(Exception):
    """A node that cannot start as asked; the message is one line saying what to change."""


def check_listen_address(text: str, origin: str) -> None:
    if "://" in text:
        raise StartError(
            f"{origin} {text}: expected HOST:PORT (a PLAINTEXT listener), e.g. {origin} "
            f"{EXAMPLE_LISTEN}; name listeners with their protocol in --set listeners=..."
        )
    host, colon, port = text.rpartition(":")
    if not colon or not host or not port.isdigit():
        raise StartError(f"{origin} {text}: expected HOST:PORT, e.g. {origin} {EXAMPLE_LISTEN}")
    if int(port) > MAX_PORT:
        raise StartError(
            f"{origin} {text}: port {port} is out of range (0-{MAX_PORT}; 0 picks a free one), "
            f"e.g. {origin} {EXAMPLE_LISTEN}"
        )


def check_log_dirs(log_dirs: list[str], origin: str) -> None:
    for d in log_dirs:
        if os.path.exists(d) and not os.path.isdir(d):
            raise StartError(
                f"{origin} {d} is a file, not a directory: name a directory (it is created if "
                "missing)"
            )
        try:
            os.makedirs(d, exist_ok=True)
        except OSError as exc:
            raise StartError(
                f"{origin} {d} cannot be created ({exc.strerror}): name a directory this user "
                "can create"
            ) from None
        try:
            fd, probe = tempfile.mkstemp(dir=d, prefix=".gregor-write-check-")
        except OSError as exc:
            raise StartError(
                f"{origin} {d} is not writable ({exc.strerror}): name a directory this user can "
                "write to"
            ) from None
        os.close(fd)
        os.unlink(probe)


def check_ports_free(config: BrokerConfig, listen_option: str) -> None:
    """`listen_option`: where the user sets the first client listener (`--listen HOST:PORT`, or
    `listeners`)."""
    wanted: list[tuple[tuple[str, int], str]] = []
    if config.membership().is_broker:
        for i, li in enumerate(config.client_listeners()):
            option = listen_option if i == 0 else f"the {li.name} listener in listeners"
            wanted.append(((li.host, li.port), option))
    controller = config.controller_listener()
    if controller is not None:
        names = config.get_str("controller.listener.names")
        wanted.append((controller, f"the {names} listener in listeners"))
    console = config.console_listener()
    if console is not None and config.membership().is_broker:
        wanted.append((console, "console.listener"))
    metrics = config.get_str("metrics.listener")
    if metrics:
        wanted.append((parse_http_listener(metrics), "metrics.listener (--metrics HOST:PORT)"))
    for (host, port), option in wanted:
        if port == 0:
            continue  # the OS picks a free one
        try:
            bind(host, port).close()
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise StartError(
                    f"{host}:{port} is already in use: pick another port with {option} (port 0 "
                    "picks a free one), or stop what holds it"
                ) from None
            raise StartError(
                f"cannot listen on {host}:{port} ({exc.strerror or exc}): change {option}"
            ) from None
