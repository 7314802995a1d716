"""The web dashboard (docs/dashboard.md): see and steer migrations from a browser.

``create_app(settings, ...)`` is a Starlette ASGI application that ``mongoshift dashboard``
serves with uvicorn and that a team can mount inside its own service. It reaches mongoshift only
through the documented API (contract ``dashboard-door``): its pages read one session's calls,
shared by every open page through one polling loop (:mod:`.poller`), and its controls are the
session's own calls, with the same rules, refusals and audit trail as the CLI. Needs the
``dashboard`` extra (Starlette, Jinja2, uvicorn).
"""

from __future__ import annotations

from .app import DashboardOptions, create_app

__all__ = ["DashboardOptions", "create_app"]
