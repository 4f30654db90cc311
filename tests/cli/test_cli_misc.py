"""`gregor --version` and `gregor completion bash|zsh`, run as a user runs them."""

from __future__ import annotations

import shutil
import subprocess
from importlib import metadata

import pytest
from cli_helpers import gregor

pytestmark = pytest.mark.client


def test_version():
    run = gregor("--version")
    assert (run.returncode, run.stdout, run.stderr) == (
        0,
        f"gregor {metadata.version('gregor')}\n",
        "",
    )


def test_bash_completion_knows_every_command_and_parses(tmp_path):
    run = gregor("completion", "bash")
    assert run.returncode == 0, run.stderr
    script = run.stdout
    for word in (
        "add-partitions",
        "leader-election",
        "log-dirs",
        "--entity-type",
        "--command-config",
    ):
        assert word in script
    path = tmp_path / "gregor.bash"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    # completing `gregor top` in a real bash offers `topics`
    probe = (
        f"source {path}; COMP_WORDS=(gregor top); COMP_CWORD=1; COMP_LINE='gregor top'; "
        "COMP_POINT=${#COMP_LINE}; "
        "f=$(complete -p gregor | sed -E 's/.*-F ([^ ]+).*/\\1/'); $f gregor top gregor; "
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30)
    assert done.stdout.split() == ["topics"], done.stderr


def test_zsh_completion():
    run = gregor("completion", "zsh")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("#compdef gregor")
    assert "add-partitions" in run.stdout
    if shutil.which("zsh"):
        path = "/dev/stdin"
        checked = subprocess.run(["zsh", "-n", path], input=run.stdout, capture_output=True)
        assert checked.returncode == 0, checked.stderr
