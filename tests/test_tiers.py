"""The test tiers (tests/conftest.py): every test of the suite has exactly one, the collection
hook gives them by what a test uses, and the guard fails a `unit` test that opens a network
socket or starts a process, while asyncio's socketpair and a client test's sockets pass."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.client  # runs pytest in child processes

TESTS = Path(__file__).parent
TIERS = {"unit", "client", "cluster", "slow"}

COLLECT = """
import json, sys
import pytest

class Tiers:
    def pytest_collection_finish(self, session):
        tiers = {i.nodeid: sorted({m.name for m in i.iter_markers()} & TIERS) for i in session.items}
        with open(sys.argv[1], "w") as f:
            json.dump(tiers, f)

TIERS = {"unit", "client", "cluster", "slow"}
sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider"], plugins=[Tiers()]))
"""


def test_every_test_of_the_suite_has_exactly_one_tier(tmp_path: Path) -> None:
    out = tmp_path / "tiers.json"
    done = subprocess.run(
        [sys.executable, "-c", COLLECT, str(out)],
        cwd=TESTS.parent,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    tiers: dict[str, list[str]] = json.loads(out.read_text())
    assert len(tiers) > 2000, "the whole suite is collected"
    wrong = {nodeid: t for nodeid, t in tiers.items() if len(t) != 1}
    assert wrong == {}
    assert {t[0] for t in tiers.values()} == TIERS
    assert tiers[f"tests/test_tiers.py::{test_a_unit_test_opening_a_socket_fails.__name__}"] == [
        "client"
    ]


SAMPLE = """
import asyncio
import contextlib
import socket
import subprocess
import sys

import pytest

from gregor import Broker
from gregor.testing.cluster import LocalCluster


def test_connects():
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", 9))
    finally:
        s.close()


def test_binds_in_a_thread():
    import threading

    def bind():
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))

    t = threading.Thread(target=bind)
    t.start()
    t.join()


@pytest.mark.unit  # the hook would make it a client test: it names subprocess
def test_starts_a_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_an_event_loop_and_a_socketpair_pass():
    asyncio.run(asyncio.sleep(0))
    a, b = socket.socketpair()
    a.close()
    b.close()


@pytest.mark.client
def test_a_client_test_may_bind():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))


def test_names_a_broker():
    assert Broker


def test_names_a_cluster():
    assert LocalCluster


@contextlib.contextmanager
def a_cluster():
    yield LocalCluster


@pytest.fixture
def nodes():
    with a_cluster() as c:
        yield c


def test_uses_a_fixture_that_calls_a_helper_that_names_a_cluster(nodes):
    assert nodes


@pytest.mark.unit
def test_an_explicit_tier_wins():
    assert subprocess
"""


@pytest.fixture
def sample(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest((TESTS / "conftest.py").read_text())
    pytester.makeini(
        "[pytest]\naddopts = --strict-markers -p no:cacheprovider\n"
        "markers =\n    unit\n    client\n    cluster\n    slow\n"
    )
    pytester.makepyfile(test_sample=SAMPLE)
    return pytester


def test_the_hook_tiers_by_what_a_test_uses(sample: pytest.Pytester) -> None:
    def collected(tier: str) -> set[str]:
        out = sample.runpytest_subprocess("--collect-only", "-q", "-m", tier).stdout.lines
        return {line.split("::")[1] for line in out if "::" in line}

    assert collected("unit") == {
        "test_connects",
        "test_binds_in_a_thread",
        "test_starts_a_process",
        "test_an_event_loop_and_a_socketpair_pass",
        "test_an_explicit_tier_wins",
    }
    assert collected("client") == {"test_a_client_test_may_bind", "test_names_a_broker"}
    assert collected("cluster") == {
        "test_names_a_cluster",
        "test_uses_a_fixture_that_calls_a_helper_that_names_a_cluster",
    }


def test_a_unit_test_opening_a_socket_fails(sample: pytest.Pytester) -> None:
    result = sample.runpytest_subprocess("-rf")
    result.assert_outcomes(passed=6, failed=3)
    text = result.stdout.str()
    for name, what in (
        ("test_connects", "called socket.connect(('127.0.0.1', 9))"),
        ("test_binds_in_a_thread", "called socket.bind(('::1', 0))"),
        ("test_starts_a_process", "started a process"),
    ):
        assert f"FAILED test_sample.py::{name}" in text
        assert f"a unit test {what}" in text
    assert text.count("mark it @pytest.mark.client") >= 3
