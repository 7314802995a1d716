"""stdout that cannot be written (the reader of a pipe went away, a full disk, a closed descriptor):
what the command did stands, the failure is one line on stderr and exit 44, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import Project, cli_env

MIGRATION = "def up(ctx):\n    ctx.db.marks.insert_one({'done': True})\n"


def run_into(project: Project, stdout: int | None, *args: str) -> subprocess.CompletedProcess[str]:
    """``mongoshift ARGS`` as a real process whose stdout is the descriptor ``stdout`` (None: closed)."""
    return subprocess.run(
        [sys.executable, "-m", "mongoshift", *args],
        cwd=project.root,
        env=cli_env(),
        stdout=stdout if stdout is not None else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        # None: the child starts with descriptor 1 closed (``>&-``)
        preexec_fn=(lambda: os.close(1)) if stdout is None else None,
    )


def closed_pipe() -> int:
    """The write end of a pipe whose reader already left (``mongoshift status --json | head -c1`` on a long document)."""
    read, write = os.pipe()
    os.close(read)
    return write


@pytest.mark.parametrize("mode", [[], ["--json"]], ids=["text", "json"])
def test_a_pipe_whose_reader_left_is_exit_44_after_the_work(project: Project, sync_client, mode: list[str]) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", MIGRATION)
    write = closed_pipe()
    try:
        done = run_into(project, write, "up", *mode)
    finally:
        os.close(write)
    assert done.returncode == 44, done.stderr
    assert "Traceback" not in done.stderr
    assert "error: cannot write stdout: Broken pipe" in done.stderr
    assert sync_client[project.db].marks.count_documents({}) == 1  # the migration ran: only its report was lost


@pytest.mark.parametrize("mode", [[], ["--json"]], ids=["text", "json"])
def test_a_closed_stdout_is_exit_44_without_a_traceback(project: Project, mode: list[str]) -> None:
    project.add("0001_a.py", MIGRATION)
    done = run_into(project, None, "status", *mode)
    assert done.returncode == 44, done.stderr
    assert "Traceback" not in done.stderr
    assert "cannot write stdout" in done.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs a device that is always full")
def test_a_full_disk_under_stdout_is_one_json_line_on_stderr_with_log_format_json(project: Project) -> None:
    project.add("0001_a.py", MIGRATION)
    with open("/dev/full", "w") as full:
        done = run_into(project, full.fileno(), "status", "--json", "--log-format", "json")
    assert done.returncode == 44, done.stderr
    line = json.loads(done.stderr.strip().splitlines()[-1])
    assert (line["kind"], line["code"], line["message"]) == ("io_failed", 44, "cannot write stdout: No space left on device")


def test_the_command_s_own_failure_keeps_its_code_when_stdout_fails_too(project: Project) -> None:
    project.add("0001_a.py", MIGRATION)
    write = closed_pipe()
    try:
        done = run_into(project, write, "up", "nosuch", "--json")
    finally:
        os.close(write)
    assert done.returncode == 8, done.stderr  # the file not found decides; the lost report is the later error
    assert "Traceback" not in done.stderr
    assert "cannot write stdout: Broken pipe" in done.stderr
