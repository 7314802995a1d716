"""``mongoshift dashboard``: serve the web dashboard (docs/dashboard.md) with uvicorn."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import socket

import click

from ..errors import AddressInUseError, DashboardRefusedError
from .app import IntRange, global_options, listen_host, output, settings
from .output import Output


@click.command(name="dashboard")
@click.option(
    "--host", default="127.0.0.1", show_default=True, callback=listen_host, help="Address to listen on; any but loopback needs MONGOSHIFT_DASHBOARD_TOKEN."
)
@click.option("--port", type=IntRange(0, 65535), default=8765, show_default=True, help="0 picks a free port.")
@click.option("--read-only", is_flag=True, help="Show no control, and refuse every one.")
@global_options
def dashboard(host: str, port: int, read_only: bool) -> None:
    """Serve the web dashboard: the line, background migrations, their partitions, throughput and controls."""
    # start-up time, and an optional extra: Starlette, Jinja2 and uvicorn load only for this command
    try:
        from ..dashboard import create_app
        from ..dashboard.security import TOKEN_ENV, checked_token, generated_token, is_loopback
        from ..dashboard.serving import dashboard_server
    except ImportError as exc:
        raise DashboardRefusedError(
            f"the dashboard needs its extra: pip install 'mongoshift[dashboard]' ({exc.name} is missing)", reason="extra_missing"
        ) from None
    token = checked_token(os.environ.get(TOKEN_ENV) or None)
    generated = False
    if token is None and not read_only:
        if not is_loopback(host):
            raise DashboardRefusedError(
                f"refusing to serve the dashboard on {host} without {TOKEN_ENV} in the environment (or use --read-only, or a loopback address)",
                host=host, reason="no_token",
            )
        token, generated = generated_token(), True
    s = settings()
    if s.tenants is None:
        # No server or no database: no read could ever succeed (a server that is down may come back; this cannot).
        # Refused as every command that connects refuses it, instead of pages saying "trying again at each read".
        if s.uri_command is None and s.uri_factory is None:
            s.require_connection()
        else:
            s.require_db()
    sock = _bound(host, port)
    app = create_app(s, token=token, read_only=read_only)
    # the open pages' event streams end as the shutdown starts (dashboard_server), so the two seconds
    # bound only the other requests still under way
    # log_config=None: uvicorn installs no handler of its own; its lines go through mongoshift's (below)
    server = dashboard_server(app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=2, log_config=None)
    stopped: list[signal.Signals] = []

    def stop(number: int, _frame: object) -> None:
        """A signal before uvicorn listens for its own, or the one it raises again after its shutdown:
        a clean stop, as ``mongoshift embedded`` makes (uvicorn alone ends in 11 "aborted" or a kill)."""
        stopped.append(signal.Signals(number))
        server.should_exit = True

    previous = {number: signal.signal(number, stop) for number in (signal.SIGINT, signal.SIGTERM)}
    where = f"http://{host if ':' not in host else f'[{host}]'}:{sock.getsockname()[1]}/"
    out = output()
    _uvicorn_through_ours()
    # Straight to the terminal, once: never through logging, so no log file or collector ever holds it.
    _tell(out, f"mongoshift dashboard on {where}{' (read-only)' if read_only else ''}")
    if out.json_mode:  # its one document, once it listens (the token stays on the terminal alone)
        out.json({"url": where, "read_only": read_only})
    if generated:
        _tell(out, f"controls token (this run only, printed once): {token}")
    try:
        asyncio.run(server.serve(sockets=[sock]))
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    if stopped:
        _tell(out, f"mongoshift dashboard: stopped ({stopped[0].name})")


def _tell(out: Output, message: str) -> None:
    """A line on stderr, written there directly, never through logging (nor left out by ``--quiet``: the token is
    printed nowhere else); one JSON object under ``--log-format json``, as every other stderr line then is."""
    if out.log_json:
        from .log_format import json_line

        message = json_line("info", message, logger="mongoshift.dashboard")
    click.echo(message, err=True)


def _uvicorn_through_ours() -> None:
    """uvicorn's own lines (a malformed request, an unforeseen error's traceback) through mongoshift's handler, after
    ``output()`` set it up (python-multipart's too): ``mongoshift: WARNING ...``, or one JSON object under ``--log-format json`` as every other
    stderr line (uvicorn's format was plain text among them), a traceback redacted as mongoshift's own are."""
    for name in ("uvicorn", "python_multipart"):  # and the form parser's word on a malformed body, which the dashboard refuses
        theirs = logging.getLogger(name)
        theirs.handlers[:] = logging.getLogger("mongoshift").handlers
        theirs.propagate = False


def _bound(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``:``port``, or the error every server command gives (exit 45)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        reason = "in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or type(exc).__name__)
        raise AddressInUseError(f"the dashboard cannot listen on {host}:{port}: {reason}", host=host, port=port, reason=reason) from None
    return sock
