"""The life of a test node or cluster: `with` starts it and closes it; closing stops it and
removes the directory it made for itself (never one it was given)."""

from __future__ import annotations

import shutil
import tempfile
from types import TracebackType
from typing import Self


class Managed:
    _made_dir: str | None = None

    def _directory(self, given: str | None, prefix: str) -> str:
        """`given`, or a new temporary directory that `close` removes."""
        directory = given or tempfile.mkdtemp(prefix=prefix)
        self._made_dir = directory if given is None else None
        return directory

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> object:
        raise NotImplementedError

    def close(self) -> None:
        self.stop()
        if self._made_dir is not None:
            shutil.rmtree(self._made_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
