"""docs/observability.md: its example runs as written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .test_api_doc import BLOCK

DOC = Path(__file__).resolve().parents[2] / "docs" / "observability.md"


def test_the_example_runs_as_written(tmp_path: Path, mongo_uri: str, db_name: str) -> None:
    scripts = [body for kind, body in BLOCK.findall(DOC.read_text(encoding="utf-8")) if kind == "python" and "asyncio.run(main())" in body]
    assert len(scripts) == 1
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOSHIFT_")}
    env.update(MONGOSHIFT_URI=mongo_uri, MONGOSHIFT_DB=db_name, PYTHONWARNINGS="error::DeprecationWarning")
    result = subprocess.run([sys.executable, "-c", scripts[0]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "0001_plans.py: backfilled plans {'matched': 2}" in result.stdout
