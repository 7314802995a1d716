"""The server a bench script measures against: the one given by ``--uri``, or an embedded one it starts."""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack
from pathlib import Path


def server_uri(stack: ExitStack, uri: str | None) -> str:
    """``uri`` as given, or a fresh embedded server's (stopped when ``stack`` closes)."""
    if uri:
        return uri
    from mongoshift.embedded.process import embedded_server

    started = stack.enter_context(embedded_server())
    print("embedded server started", file=sys.stderr, flush=True)
    return started


def embedded_pid() -> int | None:
    """The pid of the embedded server this process started (:func:`server_uri`), found among its children in
    ``/proc``; None without ``/proc`` (not Linux) or when there is none (a server given by ``--uri``)."""
    me = os.getpid()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == me and b"mongoshift.embedded" in cmdline:
            return int(stat.parent.name)
    return None


def process_cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (``/proc``, clock ticks: 10 ms steps); None when unknown."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
