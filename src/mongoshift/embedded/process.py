"""The embedded server as a child process, for the demo and the test suite.

The server computes in Python, so it runs in its own process: it does not
compete with the caller's threads for the interpreter, and ``kill`` tests can
treat it like a real server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class EmbeddedStartError(RuntimeError):
    pass


@contextmanager
def embedded_server(
    *,
    port: int = 0,
    path: Path | None = None,
    timeout: float = 60.0,
    change_history: int | None = None,
    standalone: bool = False,
) -> Iterator[str]:
    """Start ``python -m mongoshift.embedded``, yield its URI, stop it (SIGTERM) at exit.

    ``standalone`` starts a standalone server instead of the single-node replica set. The server also
    stops by itself when this process is gone without stopping it (killed, or a CI timeout's SIGTERM
    that ran no ``finally``): it never outlives the test session or the demo that started it."""
    args = [sys.executable, "-m", "mongoshift.embedded", "--port", str(port), "--parent-pid", str(os.getpid())]
    if path is not None:
        args += ["--path", str(path)]
    if change_history is not None:
        args += ["--change-history", str(change_history)]
    if standalone:
        args.append("--standalone")
    # stderr goes to a file, not a pipe: an undrained pipe would block the server once full.
    log = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("mongodb://"):
        proc.kill()
        proc.wait()
        log.seek(0)
        detail = (log.read() or line).strip()[-800:]
        log.close()
        raise EmbeddedStartError(f"the embedded server did not start: {detail}")
    try:
        yield line
    finally:
        log.close()
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
