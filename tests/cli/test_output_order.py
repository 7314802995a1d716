"""Human lines and tables keep their place among stderr's lines when both go to one file (``> log 2>&1``)."""

from __future__ import annotations

import os
import subprocess
import sys

_PROGRAM = """
import sys
from mongoshift.cli.output import Output
out = Output()
out.say("first, on stdout")
print("second, on stderr", file=sys.stderr, flush=True)
out.table(["column"], [["third, a row"]])
print("fourth, on stderr", file=sys.stderr, flush=True)
"""


def test_stdout_lines_are_not_held_back_behind_stderr_lines() -> None:
    # A real process: the buffering at issue is that of a stdout that is a pipe, which a CLI runner does not have.
    # Without PYTHONUNBUFFERED, as on a user's machine: stdout into a pipe is then block-buffered.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    done = subprocess.run(
        [sys.executable, "-c", _PROGRAM], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120, check=True, env=env
    )
    assert done.stdout.splitlines() == ["first, on stdout", "second, on stderr", "column", "third, a row", "fourth, on stderr"]
