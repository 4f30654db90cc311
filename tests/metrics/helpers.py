"""Scraping a node's metrics listener, and a real Prometheus (Debian's `prometheus` binary)
scraping nodes, queried through its HTTP API."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from gregor.testing.ports import free_ports

WAIT_S = 60.0
HAVE_PROMETHEUS = shutil.which("prometheus") is not None


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def get(url: str) -> tuple[int, str]:
    """(status, body) of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of `url`/metrics: (name, labels) -> value."""
    status, text = get(url + "/metrics")
    assert status == 200
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(samples: dict[Any, float], name: str, **labels: str) -> float:
    """The sum of `name`'s samples having `labels` (among others)."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def sample(samples: dict[Any, float], name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


class Prometheus:
    def __init__(self, listen: str) -> None:
        self.listen = listen

    def query(self, promql: str) -> list[Any]:
        url = f"http://{self.listen}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                doc = json.load(response)
        except OSError:
            return []  # not up yet
        assert doc["status"] == "success", doc
        return list(doc["data"]["result"])

    def value(self, promql: str) -> float | None:
        """The value of a query with one series; None while it has none."""
        result = self.query(promql)
        return float(result[0]["value"][1]) if len(result) == 1 else None

    def wait_value(self, promql: str, expected: float) -> None:
        wait_for(f"{promql} == {expected}", lambda: self.value(promql) == expected)


@contextmanager
def prometheus(tmp_path: Path, targets: list[str]) -> Iterator[Prometheus]:
    """Prometheus scraping `targets` (`HOST:PORT` of metrics listeners) every second."""
    listed = ", ".join(f"'{t}'" for t in targets)
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n"
        "scrape_configs:\n  - job_name: gregor\n    static_configs:\n"
        f"      - targets: [{listed}]\n"
    )
    listen = f"127.0.0.1:{free_ports(1)[0]}"
    with open(tmp_path / "prometheus.log", "wb") as log:
        process = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={config}",
                f"--web.listen-address={listen}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield Prometheus(listen)
    finally:
        process.terminate()
        process.wait(30)


def host_port(url: str) -> str:
    return url.removeprefix("http://")
