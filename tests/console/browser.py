"""For the browser tests: `gregor console` in a child process (its URL read from its first
line), and one headless Chromium (Debian's, through Playwright) per test module, with a
screenshot helper that saves under a temp dir and a record of the page's script errors."""

from __future__ import annotations

import os
import selectors
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium (apt-get install chromium)"
)


@contextmanager
def console_process(bootstrap: str, *flags: str) -> Iterator[str]:
    """`gregor console -b bootstrap --listen 127.0.0.1:0 *flags` until the block ends; yields
    its URL."""
    command = [
        sys.executable,
        "-m",
        "gregor",
        "console",
        "-b",
        bootstrap,
        "--listen",
        "127.0.0.1:0",
        *flags,
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(process.stdout, selectors.EVENT_READ)
            ready = sel.select(timeout=60)
        line = process.stdout.readline().strip() if ready else ""
        if not line.startswith("http://"):
            process.kill()
            raise AssertionError(f"gregor console printed {line!r}: {process.stderr.read()}")  # type: ignore[union-attr]
        yield line
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Screens:
    """Screenshots of the test pages, saved as PNG files under `directory`."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def take(self, page: Any, name: str) -> str:
        path = os.path.join(self.directory, f"{name}.png")
        page.screenshot(path=path, full_page=True)
        return path


@contextmanager
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


def new_page(browser: Any, errors: list[str]) -> Any:
    """A page whose script errors, failed loads and policy violations land in `errors`."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
    page.on(
        "console",
        lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None,
    )
    page.set_default_timeout(20_000)
    return page
