"""Helpers for the models tests: an application package written into the project, imported as the CLI imports it."""

from __future__ import annotations

import shutil
import sys
import textwrap
import tomllib
from typing import Any

from ..conftest import Project

PACKAGE = "shopapp"


def write_models(project: Project, source: str, module: str = "models") -> None:
    """``shopapp/<module>.py`` in the project's folder; the modules of an earlier version are forgotten,
    so the next import reads this one (as a new process would). Their bytecode goes too: a version of
    the same size written within the same second would otherwise be read from the earlier one's."""
    folder = project.root / PACKAGE
    folder.mkdir(exist_ok=True)
    shutil.rmtree(folder / "__pycache__", ignore_errors=True)
    (folder / "__init__.py").write_text("", encoding="utf-8")
    (folder / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    forget()


def forget() -> None:
    for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
        del sys.modules[name]


def declared(project: Project, collection: str) -> dict[str, Any]:
    return tomllib.loads((project.root / "collections" / f"{collection}.toml").read_text(encoding="utf-8"))
