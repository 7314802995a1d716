"""A time limit bounds the command, not only the code under it: a plain ``def`` that outlived its limit kept the
process from ending (the thread pool it ran in is joined at exit) until it returned, forever for a hung call,
although the command had said its error. Real processes: what is tested is how the interpreter ends."""

from __future__ import annotations

import json

import pytest

from ..conftest import cli_process

#: Never returns: the process must end without it. The bound of ``cli_process`` only catches the failure.
HUNG = "import threading\n\n_never = threading.Event()\n"


@pytest.mark.parametrize("transaction", [False, True])
def test_a_sync_migration_past_its_timeout_does_not_keep_the_command_running(project, transaction: bool) -> None:  # type: ignore[no-untyped-def]
    project.add(
        "0001_hangs.py",
        HUNG + f"timeout_seconds = 1\nuse_transaction = {transaction}\n\ndef up(ctx):\n    _never.wait()\n",
    )
    result = cli_process(project, "up", "--json", timeout=120)
    assert result.returncode == 14, result.stderr
    error = json.loads(result.stdout)["error"]
    assert error["kind"] == "timeout" and error["details"]["results"][0]["status"] == "failed"


def test_a_sync_uri_factory_past_its_timeout_does_not_keep_the_command_running(project) -> None:  # type: ignore[no-untyped-def]
    (project.root / "hung_source.py").write_text(HUNG + "\ndef mongo_uri():\n    _never.wait()\n", encoding="utf-8")
    project.config.write_text(
        f'[mongoshift]\nuri_factory = "hung_source:mongo_uri"\nuri_timeout_seconds = 1\ndb = "{project.db}"\n'
        'migrations_dir = "migrations"\n',
        encoding="utf-8",
    )
    result = cli_process(project, "status", "--json", timeout=120)
    assert result.returncode == 41, result.stderr
    assert "did not return within 1s" in json.loads(result.stdout)["error"]["message"]


# A wrapper (a shell script around a secret manager's client) whose own child still holds its stdout: killing the
# wrapper alone left the pipe open, and the command waited for that child to end before it said exit 41.
WRAPPER = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open({pid_file!r}, "w").write(str(child.pid))
time.sleep(600)
"""


def _status_with_uri_command(project, tmp_path, program: str):  # type: ignore[no-untyped-def]
    """``status --json`` in a real process with ``program`` (a Python script writing its child's pid to ``{pid_file}``)
    as the project's ``uri_command`` and a 1 s ``uri_timeout_seconds``; the child is killed afterwards."""
    import os
    import signal
    import sys

    pid_file = tmp_path / "child.pid"
    script = tmp_path / "uri_command.py"
    script.write_text(program.format(pid_file=str(pid_file)), encoding="utf-8")
    project.config.write_text(
        f'[mongoshift]\nuri_command = [{json.dumps(sys.executable)}, {json.dumps(str(script))}]\nuri_timeout_seconds = 1\n'
        f'db = "{project.db}"\nmigrations_dir = "migrations"\n',
        encoding="utf-8",
    )
    try:
        return cli_process(project, "status", "--json", timeout=120)
    finally:
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text(encoding="utf-8")), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_uri_command_past_its_timeout_is_killed_with_its_children(project, tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = _status_with_uri_command(project, tmp_path, WRAPPER)
    assert result.returncode == 41, result.stderr
    assert "did not finish within 1s" in json.loads(result.stdout)["error"]["message"]


# A program that prints the URI and ends, leaving a child that still holds its stdout (a credential agent it starts).
LEAVES_A_CHILD = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open({pid_file!r}, "w").write(str(child.pid))
print("mongodb://127.0.0.1:1/?directConnection=true", flush=True)
"""


def test_a_uri_command_that_ends_but_leaves_its_output_open_says_so_without_a_traceback(project, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # It was "did not finish within 1s", though it had ended, and under the error stderr showed "Exception ignored
    # in: <function BaseSubprocessTransport.__del__ ...>" with a traceback: its pipes were closed after the loop.
    result = _status_with_uri_command(project, tmp_path, LEAVES_A_CHILD)
    assert result.returncode == 41, result.stderr
    message = json.loads(result.stdout)["error"]["message"]
    assert "ended, but a process it started kept its output open past 1s (uri_timeout_seconds)" in message
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr, result.stderr
