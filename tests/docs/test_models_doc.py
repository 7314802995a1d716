"""docs/models.md, its model definitions run as written: a reader pastes them into a models module.

Each Python block that defines a model (a class of ``BaseModel``, a Beanie ``Document``, or one registered
with ``@collection``) and has no ``...`` elision is a whole module: imported in a fresh process, it must
define its classes and be read by ``collections generate``'s reader.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "models.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def model_blocks() -> list[str]:
    found = []
    for body in BLOCK.findall(DOC.read_text(encoding="utf-8")):
        if re.search(r"^class \w+\((BaseModel|Document)\):", body, re.MULTILINE) and "..." not in body:
            found.append(body)
    return found


def test_the_doc_has_model_blocks() -> None:
    assert len(model_blocks()) >= 2  # the Beanie application and the registered Pydantic model


@pytest.mark.parametrize("index", range(len(model_blocks())))
def test_a_model_block_imports_as_written_and_is_read(index: int, tmp_path: Path) -> None:
    """The registered Pydantic model's block used ``datetime`` without importing it (NameError, exit 49)."""
    package = tmp_path / "docmodels"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(model_blocks()[index])
    probe = "from mongoshift.models.readers import find_models; print(len(find_models('docmodels.models')))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) >= 1
