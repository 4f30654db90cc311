"""Fixtures of the security tests: certificates made for this run (security_certs.py), and the
client settings of each library for a listener."""

from __future__ import annotations

from pathlib import Path

import pytest
from security_certs import Pki, make_pki


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(Path(tmp_path_factory.mktemp("pki")))
