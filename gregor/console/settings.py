"""What a console is pointed at and allowed to do, and the `http://HOST:PORT` listener form."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

# Page sizes of the message browser: a larger page is a bad request, not a slow page.
MAX_PAGE_SIZE = 500
DEFAULT_PAGE_SIZE = 50


@dataclass(frozen=True)
class ConsoleSettings:
    """`client_config` holds client settings (from --command-config, say) given to every client;
    `bootstrap` wins over any bootstrap.servers in it."""

    bootstrap: str
    client_config: dict[str, Any] = field(default_factory=dict)
    read_only: bool = True
    # how often log end offsets and committed offsets are sampled for rates and lag charts
    sample_interval_s: float = 5.0
    # samples kept (a chart's width): 120 of 5 s is ten minutes
    history_samples: int = 120
    request_timeout_s: float = 10.0
    title: str = "gregor console"
    # librdkafka's own log lines (a broker down, say) go to the process's log only when verbose
    verbose: bool = False
    # each browser session signs in with SASL credentials of its own (login.py)
    login: bool = False

    def kafka_config(self, **extra: Any) -> dict[str, Any]:
        conf = {**self.client_config, "bootstrap.servers": self.bootstrap, **extra}
        conf["logger"] = client_logger(self.verbose)
        return conf


def client_logger(verbose: bool) -> logging.Logger:
    """The logger the console's clients write librdkafka's lines to: passed on to the
    process's handlers when `verbose`, dropped otherwise."""
    log = logging.getLogger("gregor.console.rdkafka")
    log.propagate = verbose
    if not log.handlers:
        log.addHandler(logging.NullHandler())
    log.setLevel(logging.DEBUG if verbose else logging.CRITICAL + 1)
    return log


def parse_listen(text: str) -> tuple[str, int]:
    """`http://127.0.0.1:8080` or `127.0.0.1:8080` -> ("127.0.0.1", 8080); ValueError naming
    what is wrong otherwise (port 0: any free port)."""
    rest = text.strip()
    scheme, sep, after = rest.partition("://")
    if sep:
        if scheme.lower() != "http":
            raise ValueError(f"{text!r}: only http:// is served")
        rest = after
    rest = rest.rstrip("/")
    host, sep, port = rest.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{text!r} is not HOST:PORT (e.g. http://127.0.0.1:8080)")
    return host, int(port)
