"""Ctrl-C while the command still waits for a server to answer: it stops at once with the interrupted code."""

from __future__ import annotations

import json
import signal

import pytest

from ..conftest import Project, reaped, start_cli

#: Two hosts where nothing listens: a lone host that refuses fails at once, two are waited for (connect_timeout_seconds).
UNREACHABLE = "mongodb://127.0.0.1:1,127.0.0.1:2/"


@pytest.mark.parametrize("command", [("status",), ("up",), ("background", "status")], ids=" ".join)
def test_ctrl_c_during_server_selection_stops_at_once_with_exit_11(tmp_path, command: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    project = Project(tmp_path, UNREACHABLE, "app")
    # a wait far beyond the test's own bound: a process that waited it out (exit 5) would not end in time
    project.write_config(connect_timeout_seconds=600)
    with reaped(start_cli(project, *command, "-v", "--json")) as process:
        assert process.stderr is not None
        seen = []
        for line in process.stderr:  # wait on the process's own word that it waits for a server (-v), not on time
            seen.append(line)
            if "connecting to MongoDB at 127.0.0.1:1, 127.0.0.1:2" in line:
                break
        else:
            pytest.fail("the process ended before connecting: " + "".join(seen))
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 11, stderr
    error = json.loads(stdout)["error"]
    assert error["kind"] == "aborted" and error["code"] == 11
    assert "while connecting to MongoDB at 127.0.0.1:1, 127.0.0.1:2; nothing was done" in error["message"]


def test_a_ctrl_c_before_the_command_handles_it_says_so(project, cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A Ctrl-C before a command's own handler was in place printed a bare "aborted" (no "error:", no cause), and
    the JSON document's message said only "aborted"."""
    from mongoshift.cli import app

    def ctrl_c(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt  # the user's Ctrl-C while the settings are read

    monkeypatch.setattr(app, "load_settings", ctrl_c, raising=False)
    monkeypatch.setattr("mongoshift.project.settings.load_settings", ctrl_c)
    result = cli(project, "status", "--json")
    assert result.returncode == 11, result.stderr
    error = json.loads(result.stdout)["error"]
    assert error["kind"] == "aborted" and error["message"] == "aborted (SIGINT)"
    assert "error: aborted (SIGINT)" in result.stderr.splitlines()
