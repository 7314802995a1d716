"""The suite's own machinery: the in-process ``cli`` fixture and the ``slow`` selection."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

from ..conftest import Cli, Project

ROOT = Path(__file__).resolve().parents[2]


def test_the_cli_fixture_leaves_the_process_as_it_found_it(project: Project, cli: Cli) -> None:
    """--json swaps stdout, the CLI points the ``mongoshift`` logger at its stderr and exports
    the project's ``.env``, a uri_factory module is imported from the project: none of it may
    reach the next test."""
    (project.root / ".env").write_text("APP_ONLY_IN_THE_COMMAND=1\n", encoding="utf-8")
    (project.root / "uri_source.py").write_text(f"def mongo_uri():\n    return {project.uri!r}\n", encoding="utf-8")
    project.config.write_text(
        f'[mongoshift]\nuri_factory = "uri_source:mongo_uri"\ndb = "{project.db}"\nmigrations_dir = "migrations"\n', encoding="utf-8"
    )
    logger = logging.getLogger("mongoshift")
    before = (sys.stdout, list(logger.handlers), logger.propagate, logger.level, os.getcwd(), dict(os.environ), list(sys.path))

    code, out, err = cli(project, "status", "--json", "-v")
    assert code == 0, err
    assert json.loads(out)["migrations"] == []
    after = (sys.stdout, list(logger.handlers), logger.propagate, logger.level, os.getcwd(), dict(os.environ), list(sys.path))
    assert after == before
    assert "uri_source" not in sys.modules

    failed = cli(project, "status", "--bogus-flag")  # a refusal ends the same way, with its own code
    assert failed.returncode == 6 and "No such option" in failed.stderr
    assert (sys.stdout, os.getcwd(), dict(os.environ)) == (before[0], before[4], before[5])


async def test_the_cli_fixture_runs_a_command_from_an_async_test(project: Project, cli: Cli) -> None:
    """The command runs its own event loop: from a running one it goes to a thread."""
    project.add("0001_a.py", "def up(ctx):\n    pass\n")
    result = cli(project, "up", "--json")
    assert result.returncode == 0, result.stderr
    assert [r["status"] for r in json.loads(result.stdout)["results"]] == ["applied"]


def _collected(*args: str) -> str:
    """What ``pytest --collect-only`` selects of the chaos tests (marked slow) with ``args``."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider", *args, "tests/background/test_chaos.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    return done.stdout


def test_the_default_run_leaves_out_slow_tests_and_dash_m_slow_selects_them() -> None:
    default = _collected()
    assert "2 deselected" in default and "test_chaos_plain" not in default
    selected = _collected("-m", "slow")
    assert "test_chaos_plain" in selected and "test_chaos_transactional" in selected and "deselected" not in selected
