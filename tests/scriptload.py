"""The project's scripts (benchmarks/, examples/) loaded into a test by path: they are not packages."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def load_script(relpath: str, name: str | None = None) -> ModuleType:
    """The module of the script at ``relpath`` (from the repository root), executed once per call
    under ``name`` (default: the file's stem), not registered in ``sys.modules``."""
    path = ROOT / relpath
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
