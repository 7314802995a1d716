"""The repository's scripts (bench/, tools/) loaded as modules, for the tests of their logic."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str) -> ModuleType:
    """``ROOT/relative`` as a module named after its file, registered in ``sys.modules`` (dataclasses
    look their module up there). Its folder is on ``sys.path`` while it loads, for the scripts that
    import a sibling (bench/embedded_speed.py imports bench/background.py)."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module
