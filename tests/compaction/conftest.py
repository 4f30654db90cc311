"""The compaction tests (storage-level, crash, broker and config tests). Helpers live in
compaction_helpers.py; the SIGKILL test's child is compaction_sigkill_child.py."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python 3.x loads its schemas with a deprecated importlib.resources call.
    config.addinivalue_line("filterwarnings", "ignore:read_text is deprecated:DeprecationWarning")
    config.addinivalue_line("filterwarnings", "ignore:open_text is deprecated:DeprecationWarning")
    # AlterConfigs (the legacy, whole-set API) is deprecated in clients but still Kafka's API.
    config.addinivalue_line(
        "filterwarnings", "ignore:alter_configs has been deprecated:DeprecationWarning"
    )
