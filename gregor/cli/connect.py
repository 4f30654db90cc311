"""The client layer of every `gregor` command that talks to a cluster: the shared flags
(`-b/--bootstrap-server`, `--command-config FILE`, `--timeout SECONDS`, `--verbose`), declared
with the command by `add_verb`, and the confluent-kafka clients and raw connections built from
them. `gregor perf` assembles its own settings (Kafka's perf-tool files and props, `--timeout`
in milliseconds as those tools take it) and builds its clients here too (`build`).

Invariants: a client is handed out only once a metadata request through it has been answered,
so an unreachable bootstrap ends within `--timeout` as one `CliError`
(`cannot reach 127.0.0.1:29199 (connection refused)`) instead of a flood of librdkafka log lines
and a traceback. librdkafka logs through the Python logger `gregor.rdkafka`, which writes to
stderr only with `--verbose`. Settings from `--command-config` (Java-properties client settings,
e.g. `security.protocol`, read by the broker's own reader) go to every client; explicit
settings of a command win over them.
"""

from __future__ import annotations

import argparse
import logging
import re
import time
from collections.abc import Callable
from typing import Any

from gregor.cli import output
from gregor.cli.errors import CliError, describe
from gregor.cli.specs import bootstrap_servers, positive_seconds

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_TIMEOUT_S = 10.0
LOGGER_NAME = "gregor.rdkafka"
# How long one metadata attempt waits while the error callback is watched for "all down".
_PROBE_S = 0.25


def add_client_args(p: argparse.ArgumentParser) -> None:
    """-b, --command-config, --verbose, and --timeout in seconds."""
    add_bootstrap_arg(p, DEFAULT_BOOTSTRAP)
    add_settings_args(p)
    p.add_argument(
        "--timeout",
        type=positive_seconds,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"request timeout (default {DEFAULT_TIMEOUT_S:g})",
    )


def add_verb(
    verbs: argparse._SubParsersAction,
    name: str,
    help: str,
    func: Callable[[argparse.Namespace], int | None],
    json_shape: str | None = None,
) -> argparse.ArgumentParser:
    """A sub-command that talks to a cluster: its parser with the client flags, `--output` (the
    JSON document's shape in its --help) when it prints data, and the function it runs."""
    v: argparse.ArgumentParser = verbs.add_parser(name, help=help)
    add_client_args(v)
    if json_shape is not None:
        output.add_output_arg(v, json_shape)
    v.set_defaults(func=func)
    return v


def add_bootstrap_arg(p: argparse.ArgumentParser, default: str | None) -> None:
    """-b/--bootstrap-server; `default` None when a properties file may name the brokers."""
    p.add_argument(
        "--bootstrap-server",
        "-b",
        default=default,
        type=bootstrap_servers,
        metavar="HOST:PORT[,...]",
        help=f"brokers to connect to (default {DEFAULT_BOOTSTRAP})",
    )


def add_settings_args(p: argparse.ArgumentParser) -> None:
    """--command-config FILE and --verbose."""
    p.add_argument(
        "--command-config",
        metavar="FILE",
        help="client settings as Java properties (key=value lines), e.g. security.protocol",
    )
    p.add_argument(
        "--verbose", action="store_true", help="show the client library's log lines on stderr"
    )


def read_properties(path: str, flag: str = "--command-config") -> dict[str, str]:
    """A Java-properties file of client settings (the broker's reader); a file that cannot be
    read is a CliError naming `flag`."""
    from gregor.broker.config import read_properties as read
    from gregor.metadata.config_defs import ConfigError

    try:
        return read(path)
    except ConfigError as exc:
        raise CliError(f"{flag} {exc}") from None
    except OSError as exc:
        raise CliError(f"{flag} {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise CliError(f"{flag} {path}: not a text file") from None


def client_config(args: argparse.Namespace, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """bootstrap.servers, then --command-config, then the command's own settings."""
    conf: dict[str, Any] = {"bootstrap.servers": args.bootstrap_server}
    if getattr(args, "command_config", None):
        conf.update(read_properties(args.command_config))
    conf.update(extra or {})
    conf["logger"] = rdkafka_logger(getattr(args, "verbose", False))
    return conf


def rdkafka_logger(verbose: bool) -> logging.Logger:
    """The logger librdkafka's lines go to: to stderr with --verbose, nowhere otherwise."""
    log = logging.getLogger(LOGGER_NAME)
    log.propagate = False
    for old in list(log.handlers):
        log.removeHandler(old)
    handler: logging.Handler = logging.StreamHandler() if verbose else logging.NullHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.DEBUG if verbose else logging.CRITICAL + 1)
    return log


class _Watch:
    """What librdkafka's error callback said: the last transport reason, and whether every
    bootstrap broker is down."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.all_down = False
        self.fatal: str | None = None

    def __call__(self, err: Any) -> None:
        name = err.name()
        if name == "_ALL_BROKERS_DOWN":
            self.all_down = True
        elif name in ("_TRANSPORT", "_RESOLVE"):
            self.reason = _reason(err.str())
        elif name in ("_AUTHENTICATION", "_SSL", "_INVALID_ARG") or err.fatal():
            self.fatal = describe(err)


def _reason(text: str) -> str:
    """'...: Connect to ipv4#127.0.0.1:29199 failed: Connection refused (after 0ms in state
    CONNECT)' -> 'connection refused'."""
    found = re.search(r"(?:failed|Failed to resolve '[^']*'): (.*?)(?: \(after \d+ms.*)?$", text)
    reason = found[1] if found else text
    return reason[:1].lower() + reason[1:]


def _build(kind: str, args: argparse.Namespace, extra: dict[str, Any] | None) -> Any:
    where = f"--command-config {args.command_config}" if args.command_config else ""
    conf = client_config(args, extra)
    return build(kind, conf, args.bootstrap_server, args.timeout, source=where)


def build(kind: str, conf: dict[str, Any], bootstrap: str, timeout_s: float, source: str) -> Any:
    """A client of `kind` ("admin", "producer" or "consumer") built from `conf`, handed out
    once `bootstrap` has answered; a setting librdkafka refuses is a CliError naming `source`
    (where the settings came from), when there is one."""
    import confluent_kafka
    from confluent_kafka.admin import AdminClient

    watch = _Watch()
    conf = {**conf, "error_cb": watch}
    if "logger" not in conf:  # (rdkafka_logger sets up the one shared logger: called once)
        conf["logger"] = rdkafka_logger(False)
    factory = {
        "admin": AdminClient,
        "producer": confluent_kafka.Producer,
        "consumer": confluent_kafka.Consumer,
    }[kind]
    try:
        client = factory(conf)
    except (confluent_kafka.KafkaException, ValueError, TypeError) as exc:
        where = f" (from {source})" if source else ""
        raise CliError(f"bad client setting{where}: {describe(exc)}") from None
    wait_until_reachable(client, bootstrap, timeout_s, watch)
    return client


def admin(args: argparse.Namespace, extra: dict[str, Any] | None = None) -> Any:
    """An AdminClient whose bootstrap has answered."""
    return _build("admin", args, extra)


def producer(args: argparse.Namespace, extra: dict[str, Any] | None = None) -> Any:
    """A Producer whose bootstrap has answered."""
    return _build("producer", args, extra)


def consumer(args: argparse.Namespace, extra: dict[str, Any] | None = None) -> Any:
    """A Consumer (neither subscribed nor assigned yet) whose bootstrap has answered."""
    return _build("consumer", args, extra)


def wait_until_reachable(client: Any, bootstrap: str, timeout_s: float, watch: _Watch) -> Any:
    """The cluster's metadata through `client`; CliError once every bootstrap broker has failed
    or `timeout_s` has passed without an answer."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        try:
            return client.list_topics(timeout=max(0.01, min(_PROBE_S, left)))
        except KafkaException as exc:
            if exc.args[0].name() not in ("_TRANSPORT", "_TIMED_OUT", "_RESOLVE"):
                raise CliError(f"cannot reach {bootstrap}: {describe(exc)}") from None
        client.poll(0)  # serves the error callback (and the log lines)
        if watch.fatal:
            raise CliError(f"cannot connect to {bootstrap}: {watch.fatal}")
        if watch.all_down and watch.reason:
            raise CliError(f"cannot reach {bootstrap} ({watch.reason})")
        if time.monotonic() >= deadline:
            why = watch.reason or f"no answer in {timeout_s:g} s"
            raise CliError(f"cannot reach {bootstrap} ({why})")


def brokers(admin_client: Any, timeout_s: float) -> dict[int, str]:
    """Every registered broker's `host:port`, by node id."""
    md = admin_client.list_topics(timeout=timeout_s)
    return {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()}


def raw(
    address: str,
    timeout_s: float,
    client_id: str = "gregor-cli",
    settings: dict[str, str] | None = None,
) -> Any:
    """A RawClient (our own codec, one socket) to one `host:port`, for the APIs confluent-kafka
    does not expose, secured as the client `settings` say (`raw_settings(args)`: TLS and SASL
    from --command-config); an unreachable address or a refused login is a CliError."""
    import ssl

    from gregor.security.client_properties import connect_args
    from gregor.testing.raw_client import RawClient

    try:
        secured = connect_args(settings or {})()
    except ValueError as exc:
        raise CliError(str(exc)) from None
    try:
        return RawClient(address, client_id=client_id, timeout_s=timeout_s, **secured)
    except TimeoutError:
        raise CliError(f"cannot reach {address} (no answer in {timeout_s:g} s)") from None
    except PermissionError as exc:
        raise CliError(f"cannot connect to {address}: {exc}") from None
    except ssl.SSLError as exc:
        raise CliError(f"cannot connect to {address}: TLS: {exc.reason or exc}") from None
    except (OSError, ConnectionError) as exc:
        reason = (getattr(exc, "strerror", None) or str(exc)).lower()
        raise CliError(f"cannot reach {address} ({reason})") from None
    except ValueError:
        raise CliError(f"not a HOST:PORT address: {address!r}") from None


def raw_settings(args: argparse.Namespace) -> dict[str, str]:
    """The --command-config settings, for `raw` (empty without the flag)."""
    path = getattr(args, "command_config", None)
    return read_properties(path) if path else {}


def first_raw(
    bootstrap: str,
    timeout_s: float,
    client_id: str = "gregor-cli",
    settings: dict[str, str] | None = None,
) -> Any:
    """A RawClient to the first address of a comma-separated bootstrap list that answers."""
    error: CliError | None = None
    for address in (a.strip() for a in bootstrap.split(",")):
        if address:
            try:
                return raw(address, timeout_s, client_id, settings)
            except CliError as exc:
                error = exc
    raise error or CliError(f"no address in --bootstrap-server {bootstrap!r}")


def call(conn: Any, api_key: int, body: Any, address: str) -> Any:
    """`body` sent over a RawClient at the newest version both sides speak (asked once per
    connection with ApiVersions)."""
    from gregor.protocol import api_keys
    from gregor.protocol.messages import ApiVersionsRequest

    theirs_by_key = getattr(conn, "api_versions", None)
    if theirs_by_key is None:
        answer = conn.call(api_keys.API_VERSIONS, 0, ApiVersionsRequest())
        theirs_by_key = {a.api_key: a for a in answer.api_keys}
        conn.api_versions = theirs_by_key
    ours = api_keys.BY_KEY[api_key]
    theirs = theirs_by_key.get(api_key)
    if theirs is None or theirs.max_version < ours.min_version:
        raise CliError(f"{address} does not serve {ours.name}")
    return conn.call(api_key, min(theirs.max_version, ours.max_version), body)
