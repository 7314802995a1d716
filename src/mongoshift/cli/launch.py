"""The ``mongoshift`` program's entry: loads the command line, and ends quietly on a Ctrl-C that comes first.

Loading the command line (click, the driver's modules, the commands) takes a moment, seconds on a busy host;
a Ctrl-C in that moment, before any handler of the command line is in place, printed Python's traceback of
whatever was being imported. Nothing has run then: it is exit 11 (``aborted``), and under ``--json`` still one
document, as a Ctrl-C before a run's own signal handler is (:func:`mongoshift.cli.main.main`). This module
imports nothing heavy itself, so that the window it cannot cover is Python's own start-up only.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import signal
import sys

from ..errors import RunAbortedError


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if argv is None:  # the program itself, not a caller in-process: the signals of its end are its own
        atexit.register(_signals_ignored)  # registered first, so that it runs last: after the driver's exit handlers
    try:
        from .main import main as run
    except KeyboardInterrupt:
        stopped = RunAbortedError("stopped (Ctrl-C) while mongoshift was starting; nothing ran")
        try:
            if "--json" in args:
                print(json.dumps({"error": stopped.to_json()}, indent=2), flush=True)
            print(_error_line(args, stopped), file=sys.stderr)
        except KeyboardInterrupt:  # another one: the exit is all that is left to do
            pass
        sys.exit(stopped.exit_code)
    try:
        run(argv)
    except SystemExit as done:
        if argv is None:
            _ending(done.code)
        raise


def _error_line(args: list[str], stopped: RunAbortedError) -> str:
    """The stderr line: under ``--log-format json`` one JSON object, as every failure's (the fields of
    ``cli.log_format.json_line``, which is not loaded yet)."""
    if "--log-format=json" in args or any(a == "--log-format" and b == "json" for a, b in itertools.pairwise(args)):
        from datetime import UTC, datetime

        when = datetime.now(UTC).isoformat(timespec="milliseconds")
        line = {"time": when, "level": "error", "logger": "mongoshift", "message": stopped.message, "kind": stopped.kind, "code": int(stopped.exit_code)}
        return json.dumps(line)
    return f"error: {stopped.message}"


def _ending(code: object) -> None:
    """The command's outcome is decided and said (its document printed, its records written); what is left is
    the interpreter's exit, in which the driver closes its connections and joins its threads. A Ctrl-C or
    SIGTERM then (a second one pressed a moment late) printed a ``KeyboardInterrupt`` traceback of that
    shutdown, or ended the process by the signal, 130 in a shell, against the code its document said. From
    here a signal ends the process at once with the code already decided; past the exit handlers, where
    Python gives signals their default action back, it is ignored."""
    status = code if isinstance(code, int) else 0 if code is None else 1

    def now(_signum: int, _frame: object) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # a closed or broken stream: the code is what is left to give
                pass
        os._exit(status)

    global _ended
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, now)
    except ValueError:  # not the main thread (the command line run in-process): its host's signals are its own
        return
    _ended = True


#: Whether :func:`_ending` took the signals over: the process is ending with its code.
_ended = False


def _signals_ignored() -> None:
    """The last exit handler: Python gives signals their default action back after it."""
    if _ended:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
