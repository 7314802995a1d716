"""The ``mongoshift`` program's entry: loads the command line, and ends quietly on a Ctrl-C that comes first.

Loading the command line (click, the driver's modules, the commands) takes a moment, seconds on a busy host;
a Ctrl-C in that moment, before any handler of the command line is in place, printed Python's traceback of
whatever was being imported. Nothing has run then: it is exit 11 (``aborted``), and under ``--json`` still one
document, as a Ctrl-C before a run's own signal handler is (:func:`mongoshift.cli.main.main`). This module
imports nothing heavy itself, so that the window it cannot cover is Python's own start-up only.
"""

from __future__ import annotations

import json
import sys

from ..errors import RunAbortedError


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    try:
        from .main import main as run
    except KeyboardInterrupt:
        stopped = RunAbortedError("stopped (Ctrl-C) while mongoshift was starting; nothing ran")
        try:
            if "--json" in args:
                print(json.dumps({"error": stopped.to_json()}, indent=2), flush=True)
            print(f"error: {stopped.message}", file=sys.stderr)
        except KeyboardInterrupt:  # another one: the exit is all that is left to do
            pass
        sys.exit(stopped.exit_code)
    run(argv)
