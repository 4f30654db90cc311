"""Test tiers, the guard of the fast tier, and the broker fixtures shared by the test directories.

Every test carries exactly one tier marker, so that `python -m pytest -m unit` runs the fast tier
alone (`-m "not slow"`, `-m cluster` and so on work too):

- `unit`: in this process, no network socket, no child process;
- `client`: one node: a real broker (a `gregor.Broker` child process, or a `BrokerServer`
  serving a socket), real clients, a raw socket, or another child process;
- `cluster`: several nodes: a `LocalCluster`, the `gregor cluster` command, or several Raft
  drivers talking over loopback;
- `slow`: long soaks and model runs (chaos, churn, the storage state-machine models).

The tier of a test, in this order:
1. a tier marker on the test, its class or its module (`pytestmark`) wins;
2. else the names its code uses decide: its body, its fixtures, and the functions and classes
   of tests/ and gregor/testing/ they name, followed transitively (not into the rest of
   gregor/): a name in CLUSTER_NAMES makes it `cluster`, else one in CLIENT_NAMES `client`;
3. else `unit`.

The guard: while a `unit` test runs, connecting or binding an AF_INET/AF_INET6 socket or starting
a process (`subprocess.Popen`, which asyncio's subprocesses use too) fails the test with a message
that says to mark it `client`. AF_UNIX socketpairs (every asyncio event loop has one) and
multiprocessing are allowed; threads alive before the test began are not watched. Sockets that
C code opens itself (uvloop, librdkafka) are not seen: such tests are `client` by rule 2.
"""

from __future__ import annotations

import faulthandler
import inspect
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import types
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gregor import Broker, testing

pytest_plugins = ("pytester",)  # tests/test_tiers.py runs the guard on a sample

TIERS = ("unit", "client", "cluster", "slow")
CLUSTER_NAMES = frozenset({"LocalCluster", "RaftDriver"})
CLIENT_NAMES = frozenset(
    {
        # a broker, a server or another process
        "Broker",
        "serve",
        "start_server",
        "subprocess",
        "Popen",
        # sockets and clients of a broker
        "create_connection",
        "open_connection",
        "free_ports",
        "RawClient",
        "NetworkClient",
        "Producer",
        "Consumer",
        "AdminClient",
        "KafkaProducer",
        "KafkaConsumer",
        "KafkaAdminClient",
        "AIOKafkaProducer",
        "AIOKafkaConsumer",
        "AIOKafkaAdminClient",
    }
)
# Code whose names count: the tests, and gregor's pytest plugin and test helpers.
OURS = tuple(
    os.path.join(os.path.dirname(os.path.abspath(d)), "") for d in (__file__, testing.__file__)
)
GUARD_FIXTURE = "_unit_tier_guard"


# --- tiers -----------------------------------------------------------------------------------


def _ours(obj: Any) -> bool:
    try:
        path = inspect.getsourcefile(obj)
    except (TypeError, OSError):
        return False
    return path is not None and os.path.abspath(path).startswith(OURS)


def _names_of_code(code: types.CodeType) -> Iterator[str]:
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _names_of_code(const)


class _Uses:
    """The names that code uses, followed through the functions and classes of ours it calls."""

    def __init__(self) -> None:
        self._direct: dict[int, tuple[set[str], list[Any]]] = {}

    def of(self, roots: list[Any]) -> set[str]:
        names: set[str] = set()
        seen: set[int] = set()
        todo = list(roots)
        while todo:
            obj = todo.pop()
            if id(obj) not in seen:
                seen.add(id(obj))
                direct, callees = self._direct_of(obj)
                names |= direct
                todo += callees
        return names

    def _direct_of(self, obj: Any) -> tuple[set[str], list[Any]]:
        if id(obj) not in self._direct:
            self._direct[id(obj)] = self._read(obj)
        return self._direct[id(obj)]

    @staticmethod
    def _read(obj: Any) -> tuple[set[str], list[Any]]:
        """The names `obj` uses itself, and the functions and classes of ours it names."""
        if isinstance(obj, type):
            methods = []
            for member in vars(obj).values():
                func = getattr(member, "__func__", member)  # staticmethod, classmethod
                methods.append(func.fget if isinstance(func, property) else func)
            return {base.__name__ for base in obj.__mro__}, [
                m for m in methods if inspect.isfunction(m) and _ours(m)
            ]
        func = inspect.unwrap(getattr(obj, "__func__", obj))
        if not inspect.isfunction(func):
            return set(), []
        names = set(_names_of_code(func.__code__))
        callees = []
        for name in names:
            target = func.__globals__.get(name)
            if inspect.isfunction(target):
                target = inspect.unwrap(target)  # e.g. a @contextmanager helper
            if (inspect.isfunction(target) or isinstance(target, type)) and _ours(target):
                callees.append(target)
        return names, callees


def _tier_from_uses(item: pytest.Function, uses: _Uses) -> str:
    roots = [item.obj]
    if item.cls is not None and _ours(item.cls):
        roots.append(item.cls)
    for name, defs in item._fixtureinfo.name2fixturedefs.items():
        if name != GUARD_FIXTURE and defs and _ours(defs[-1].func):
            roots.append(defs[-1].func)
    names = uses.of(roots)
    if names & CLUSTER_NAMES:
        return "cluster"
    if names & CLIENT_NAMES:
        return "client"
    return "unit"


def tiers_of(item: pytest.Item) -> list[str]:
    return [m.name for m in item.iter_markers() if m.name in TIERS]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    uses = _Uses()
    for item in items:
        explicit = set(tiers_of(item))
        if len(explicit) > 1:
            raise pytest.UsageError(f"{item.nodeid} has several tiers: {sorted(explicit)}")
        if not explicit and isinstance(item, pytest.Function):
            item.add_marker(_tier_from_uses(item, uses))


# --- the guard of the unit tier --------------------------------------------------------------

_INET = (socket.AF_INET, socket.AF_INET6)
VIOLATIONS = pytest.StashKey[list[str]]()


class UnitTierViolation(RuntimeError):
    pass


def _violation(what: str) -> str:
    return (
        f"a unit test {what}: unit tests run in this process without network sockets or child "
        "processes; mark it @pytest.mark.client (or cluster), or keep it off the network"
    )


# --- the watchdog of hangs that hold the GIL ------------------------------------------------
# pytest-timeout fails a test from Python, which cannot run while C code (a client library's
# close, say) holds the GIL. faulthandler's own thread needs no GIL: past the test's timeout plus
# a grace it writes every thread's stack to a file and ends the process, so the run goes on (xdist
# replaces the worker and reports the test as crashed) and the summary prints where it hung.

GRACE_S = 120
_HANGS_DIR = os.path.join(
    tempfile.gettempdir(),
    f"gregor-test-hangs-{os.getppid() if 'PYTEST_XDIST_WORKER' in os.environ else os.getpid()}",
)


def _timeout_of(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    return float(item.config.getini("timeout") or 0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    timeout = _timeout_of(item)
    if timeout <= 0:
        yield
        return
    os.makedirs(_HANGS_DIR, exist_ok=True)
    path = os.path.join(_HANGS_DIR, f"{os.getpid()}.txt")
    with open(path, "w") as out:
        out.write(f"{item.nodeid} did not end within {timeout + GRACE_S:.0f} s:\n")
        out.flush()
        faulthandler.dump_traceback_later(timeout + GRACE_S, exit=True, file=out)
        try:
            yield
        finally:
            faulthandler.cancel_dump_traceback_later()
    os.unlink(path)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the stacks of the tests the watchdog ended (in the process that reports)."""
    if "PYTEST_XDIST_WORKER" in os.environ or not os.path.isdir(_HANGS_DIR):
        return
    for entry in sorted(os.listdir(_HANGS_DIR)):
        path = os.path.join(_HANGS_DIR, entry)
        with open(path) as f:
            text = f.read()
        os.unlink(path)
        if "Thread 0x" in text or "Current thread" in text:
            terminalreporter.write_sep("=", "a test that hung, ended by the watchdog")
            terminalreporter.write_line(text)
    os.rmdir(_HANGS_DIR)


# A shell without job control starts a background command (`.ci/run &`) with SIGINT ignored,
# and every process the tests start would inherit that: the commands' Ctrl-C tests need SIGINT
# as a terminal delivers it.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _signals_left_as_found() -> Iterator[None]:
    """A test leaves the worker's SIGINT handling as it found it: a handler ignored or a signal
    blocked here is inherited by every process the later tests start (`gregor consume` and
    `produce` then never see their Ctrl-C)."""
    before = signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    after = signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, [])
    if after != before:
        signal.signal(signal.SIGINT, before[0])
        signal.pthread_sigmask(signal.SIG_SETMASK, before[1])
        pytest.fail(f"the test changed SIGINT handling: {before} -> {after}")


@pytest.fixture(autouse=True)
def _unit_tier_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if "unit" not in tiers_of(request.node):
        return
    before = {t for t in threading.enumerate() if t is not threading.current_thread()}
    seen: list[str] = request.node.stash.setdefault(VIOLATIONS, [])

    def refuse(what: str) -> None:
        if threading.current_thread() in before:
            return
        seen.append(_violation(what))
        raise UnitTierViolation(seen[-1])

    def guarded(name: str) -> Callable[..., Any]:
        real = getattr(socket.socket, name)

        def call(sock: socket.socket, *args: Any, **kwargs: Any) -> Any:
            if sock.family in _INET:
                refuse(f"called socket.{name}({', '.join(map(repr, args))})")
            return real(sock, *args, **kwargs)

        return call

    for name in ("connect", "connect_ex", "bind"):
        monkeypatch.setattr(socket.socket, name, guarded(name))
    real_popen_init = subprocess.Popen.__init__

    def popen_init(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        refuse(f"started a process: {args!r}")
        real_popen_init(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", popen_init)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    seen = item.stash.get(VIOLATIONS, [])
    if seen and report.when == "call":
        if report.failed:  # e.g. it waited for a thread the guard stopped, and timed out
            report.sections.append(("unit tier guard", "\n".join(seen)))
        else:
            report.outcome = "failed"
            report.longrepr = seen[0]
    return report


# --- brokers shared by the test directories --------------------------------------------------


@pytest.fixture
def broker_config() -> dict[str, str]:
    """The config of the brokers `make_broker` starts; a directory or a module overrides it."""
    return {}


@pytest.fixture
def make_broker(broker_config: dict[str, str]) -> Iterator[Callable[..., Broker]]:
    """Start brokers of this test's own (`broker_config` and the keywords given); each is closed
    at the end, and the tail of its log printed (pytest shows it when the test failed)."""
    made: list[Broker] = []

    def make(**extra: str) -> Broker:
        b = Broker(config={**broker_config, **extra}, log_level="INFO")
        made.append(b)
        return b.start()

    yield make
    for b in made:
        print(f"--- the last lines of {b.log_path}:")
        print("\n".join(b.read_log().splitlines()[-80:]))
        b.close()


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A topic, group and transactional id of this test's own."""
    base = re.sub(r"[^a-zA-Z0-9._-]", "_", request.node.name)[:90]
    return f"{base}-{uuid.uuid4().hex[:6]}"
