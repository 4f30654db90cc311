"""Every package directory is a regular package, so `pip install gregor` (not only an editable
install) ships it: setuptools' package discovery skips directories without __init__.py."""

from pathlib import Path

import gregor


def test_every_source_directory_has_an_init():
    root = Path(gregor.__file__).parent
    missing = [
        str(d.relative_to(root))
        for d in root.rglob("*")
        if d.is_dir()
        and d.name != "__pycache__"
        and any(d.glob("*.py"))
        and not (d / "__init__.py").exists()
    ]
    assert missing == []
