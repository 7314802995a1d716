"""The embedded server as a child process: it never outlives the process that started it."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from urllib.parse import urlparse

from ..cli.test_cli import wait_for

PARENT = textwrap.dedent(
    """
    import time
    from mongoshift.embedded.process import embedded_server

    with embedded_server() as uri:
        print(uri, flush=True)
        time.sleep(600)
    """
)


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def test_a_server_whose_parent_is_killed_stops_by_itself() -> None:
    """``kill -9`` of the parent (a test session stopped by a CI timeout) runs no ``finally``: the server stops anyway."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        port = urlparse(parent.stdout.readline().strip()).port
        assert port is not None and _listening(port)
    finally:
        parent.kill()
        parent.wait()
    wait_for(lambda: not _listening(port))  # the orphaned server stopping (the bound only ends a hang)
