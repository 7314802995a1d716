"""Serving the dashboard with uvicorn: a shutdown that does not wait on the open pages.

An open page keeps its event stream (``/events``) open for as long as it is shown. uvicorn's
shutdown waits for every open response before it runs the application's lifespan shutdown, where
the dashboard would end its streams: without ``timeout_graceful_shutdown`` it waits for ever, with
one it waits that long and then cancels the streams. :class:`DashboardServer` ends the streams
first (:meth:`~.app.Dashboard.end_streams`), so each response ends cleanly and the shutdown goes on
at once. ``mongoshift dashboard`` serves with it; so can an application that serves the dashboard
on its own (a mounted one: see docs/dashboard.md).
"""

from __future__ import annotations

import socket
from typing import Any

import uvicorn

from .app import Dashboard


class DashboardServer(uvicorn.Server):
    """A uvicorn server whose shutdown first ends the event streams of the given dashboards."""

    def __init__(self, config: uvicorn.Config, dashboards: list[Dashboard]) -> None:
        super().__init__(config)
        self.dashboards = dashboards

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for dashboard in self.dashboards:
            await dashboard.end_streams()
        await super().shutdown(sockets=sockets)


def dashboard_server(app: Any, **config: Any) -> DashboardServer:
    """A :class:`DashboardServer` for ``create_app``'s ``app`` (``config``: uvicorn's ``Config`` keywords).

    ``proxy_headers`` is off unless given: uvicorn's default trusts ``X-Forwarded-For`` from 127.0.0.1, so any local
    client (every client of a loopback dashboard) could write the address the history's "who" names."""
    config.setdefault("proxy_headers", False)
    return DashboardServer(uvicorn.Config(app, **config), [app.state.dashboard])
