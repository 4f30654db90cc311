"""Fixtures of the storage tests."""

from __future__ import annotations

import shutil
import tempfile

import pytest

from .storage_helpers import MEMORY_TMP


@pytest.fixture
def memory_tmp(tmp_path):
    if MEMORY_TMP is None:
        yield tmp_path
        return
    d = tempfile.mkdtemp(prefix="gregor-test-", dir=MEMORY_TMP)
    try:
        yield type(tmp_path)(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
