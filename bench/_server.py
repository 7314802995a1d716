"""The server a bench script measures against: the one given by ``--uri``, or an embedded one it starts."""

from __future__ import annotations

import sys
from contextlib import ExitStack


def server_uri(stack: ExitStack, uri: str | None) -> str:
    """``uri`` as given, or a fresh embedded server's (stopped when ``stack`` closes)."""
    if uri:
        return uri
    from mongoshift.embedded.process import embedded_server

    started = stack.enter_context(embedded_server())
    print("embedded server started", file=sys.stderr, flush=True)
    return started
