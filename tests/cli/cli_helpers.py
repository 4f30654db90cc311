"""Running the `gregor` command as a user does: a child process, its stdout, stderr and exit
status, timed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    elapsed_s: float

    def json(self) -> Any:
        assert self.returncode == 0, self.stderr
        return json.loads(self.stdout)


def gregor(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> Run:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "gregor.cli.main", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, **(env or {})},
    )
    return Run(done.returncode, done.stdout, done.stderr, time.monotonic() - started)


def one_line_error(run: Run, line: str) -> None:
    """The run failed with exactly `line` on stderr, no traceback, nothing on stdout."""
    assert run.returncode == 1, (run.returncode, run.stdout, run.stderr)
    assert run.stderr == line + "\n", run.stderr
    assert "Traceback" not in run.stderr
