"""``create_app``: the dashboard as a Starlette application (pages, the event stream, the controls).

Pages are rendered on the server, whole, so they work with JavaScript off and can be refreshed;
with it on, htmx swaps each page's live part from a server-sent event stream fed by the shared
:class:`~.poller.Poller`. Controls are plain POST forms (CSRF, an operator: see :mod:`.security`)
that call the API's session with the operator as ``executed_by``, so the history says who and why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from jinja2 import Environment, FileSystemLoader, pass_context
from pymongo import AsyncMongoClient
from pymongo.errors import PyMongoError
from starlette.applications import Starlette
from starlette.datastructures import URL
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from .. import api
from ..api.background import REASON_LIMIT
from ..api.session import per_call
from ..errors import ConfigInvalidError, ExitCode, MongoshiftError, NotAppliedError
from . import views
from .poller import TENANTS_EVERY, Poller, Snapshot, described
from .security import CSRF_COOKIE, HOLDER_COOKIE, Guard, Identity, checked_token

log = logging.getLogger("mongoshift.dashboard")

HERE = Path(__file__).parent
#: The background controls a page offers; those marked True ask for a confirmation first (as the CLI asks).
CONTROLS: dict[str, bool] = {"pause": False, "resume": False, "cancel": True, "retry": False, "retry-from-start": True, "unlock": True}
#: How many failed documents' ids a token holder sees when asking.
IDS_SHOWN = 100
#: The longest reason the forms take: the API's (a longer one is refused, exit 6, as the CLI refuses it; never cut).
REASON_CHARS = REASON_LIMIT
#: The throttle form's fields as its labels say them: a refused value is named so (the CLI names its flags).
THROTTLE_FIELDS = {"batch_size": "Batch size", "pause_ms": "Pause (ms)"}


@dataclass(frozen=True)
class DashboardOptions:
    """How one dashboard behaves (``create_app``'s keywords, kept together for the pages)."""

    read_only: bool = False
    poll_seconds: float = 1.0
    title: str = "mongoshift"


class Dashboard:
    """One dashboard's session, poller and guard; the session opens on first use (a mounted app gets no lifespan).

    Opening it (connecting, for a dashboard without the application's client) is the poller's first read: a server
    down or credentials refused at start are a failed read that every page shows, and each later read tries again.
    """

    def __init__(self, settings: api.Settings, client: AsyncMongoClient[Any] | None, guard: Guard, options: DashboardOptions) -> None:
        self.settings = settings
        self.guard = guard
        self.options = options
        self._client = self._given_client = client
        self._stack: contextlib.AsyncExitStack | None = None
        self._ms: api.Mongoshift | None = None
        self._opened = False
        self._poller: Poller | None = None
        # the first requests may arrive together: one of them opens the session, the others wait for it
        # (two would each open one, and ``aclose`` would close only the last: a client and a poller left open)
        self._opening = asyncio.Lock()
        self._streams_ended = False

    async def poller(self) -> Poller:
        """The shared poller (made without any I/O: it opens the session at its first read)."""
        if self._poller is None:
            tenants = self._read_tenants if self.settings.tenants is not None else None
            self._poller = Poller(None, interval=self.options.poll_seconds, tenants=tenants, opener=self.session)
            if self._streams_ended:  # made by a request that arrived while the server shuts down
                await self._poller.close()
        return self._poller

    async def session(self) -> api.Mongoshift | None:
        """The project's session (None: a project of tenants only), opened now if it is not.

        Raises why it could not be opened (``ConnectionFailedError``, ``AuthFailedError``, ...): nothing is kept
        open then, and the next call tries again.
        """
        if self._opened:
            return self._ms
        async with self._opening:
            if not self._opened:
                await self._open()
            return self._ms

    async def _open(self) -> None:
        stack = contextlib.AsyncExitStack()
        client = self._client
        try:
            if client is None:
                # a project of tenants only names no db: the client connects to the server, as the tenant calls do
                connecting = self.settings if self.settings.db else self.settings.model_copy(update={"db": "admin"})
                client = await api.open_client(connecting)
                stack.push_async_callback(client.close)
            ms = None
            if self.settings.db or self.settings.tenants is None:  # a project of tenants only has no line of its own
                ms = await stack.enter_async_context(api.connect(self.settings, client=client))
        except BaseException:
            await stack.aclose()
            raise
        self._client, self._stack, self._ms, self._opened = client, stack, ms, True

    async def _read_tenants(self) -> views.TenantsSummary:
        """Every tenant's ``status`` (the ``[tenants]`` selection, on the dashboard's client), summarised."""
        report = await api.status_across(self.settings, api.Tenants(all=True), client=self._client)
        return views.summarise_tenants(report)

    async def steer(self, who: str) -> api.Mongoshift:
        """A session for one control whose history entry names ``who`` (on the dashboard's connection; raises
        why it could not be opened)."""
        await self.session()
        return per_call(self.settings.model_copy(update={"executed_by": who}), client=self._client)

    async def end_streams(self) -> None:
        """End every open page's event stream now (each response ends cleanly, so its connection can close).

        A server waits for its open responses before it shuts down (uvicorn before the lifespan's
        shutdown, for ever without ``timeout_graceful_shutdown``): call this when the shutdown starts,
        as :class:`~.serving.DashboardServer` does. Pages still load; a stream opened later ends at once.
        """
        self._streams_ended = True
        if self._poller is not None:
            await self._poller.close()

    async def aclose(self) -> None:
        """Stop the poller and close the session (and the client it opened); call it at a mounting app's shutdown."""
        if self._poller is not None:
            await self._poller.close()
        if self._stack is not None:
            await self._stack.aclose()
        self._poller, self._stack, self._client = None, None, self._given_client
        self._ms, self._opened = None, False


def create_app(
    settings: api.Settings,
    *,
    client: AsyncMongoClient[Any] | None = None,
    token: str | None = None,
    identity: Identity | None = None,
    read_only: bool = False,
    poll_seconds: float = 1.0,
) -> Starlette:
    """The dashboard as an ASGI application.

    ``client``: the application's open client (left open). ``token``: the shared secret a control
    needs (at least 16 characters; None: only ``identity`` may steer). ``identity(request)``: the
    mounting application's name for the request's user (it authenticated them), used as the
    audit's "who"; None for a request it does not vouch for. ``read_only``: no control is shown,
    and every one is refused. The app is ``app.state.dashboard`` (:class:`Dashboard`); a mounting
    application calls ``await app.state.dashboard.aclose()`` at shutdown.
    """
    _check_options(client=client, token=token, identity=identity, read_only=read_only, poll_seconds=poll_seconds)
    guard = Guard(checked_token(token), identity, read_only)
    options = DashboardOptions(read_only=read_only, poll_seconds=float(poll_seconds))
    dashboard = Dashboard(settings, client, guard, options)
    env = Environment(loader=FileSystemLoader(str(HERE / "templates")), autoescape=True)
    env.globals.update(
        reason_chars=REASON_CHARS, count=views.count, clock=api.clock, percent=views.percent, when=views.when, plural=api.plural,
        controls=CONTROLS, url_for=_template_path_for,
    )
    templates = Jinja2Templates(env=env)  # keeps the url_for above: it only sets its own where none is

    def page(request: Request, template: str, context: Mapping[str, Any], status: int = 200) -> Response:
        csrf = Guard.csrf_value(request)
        response: Response = templates.TemplateResponse(
            request, template,
            {
                "status": status, "options": options, "csrf": csrf, "holder": guard.is_holder(request), "token_set": guard.token is not None,
                "here": _back_to(request),
                "said": guard.signed(request.query_params.get("said"), request.query_params.get("sig"), _page_of(request)), **context,
            },
            status_code=status,
        )
        _harden(response)
        if request.cookies.get(CSRF_COOKIE) != csrf:
            response.set_cookie(CSRF_COOKIE, csrf, httponly=True, samesite="strict", path=_cookie_path(request))
        return response

    own_line = bool(settings.db) or settings.tenants is None  # a project of tenants only has no line of its own
    has_tenants = settings.tenants is not None

    def unread(request: Request, snap: Snapshot) -> Response:
        """What a page that needs the project's state answers while it was never read: the failure (503), no guess."""
        return page(request, "error.html", {"message": f"The last read failed: {snap.error or 'not read yet'}"}, 503)

    def overview_context(snap: Snapshot) -> dict[str, Any]:
        return {
            "snap": snap,
            "own_line": own_line,
            "has_tenants": has_tenants,
            "tenants_every": f"{TENANTS_EVERY * options.poll_seconds:g}",
            "counts": views.line_counts(snap.rows),
            "verdicts": views.verdicts(snap.audit),
            # what the audit said of the lock (a stale one: its holder gone, its lease run out), in its words
            "lock_findings": [f for f in snap.audit.findings if f.subject == "lock"] if snap.audit is not None else [],
            "recent": [r for r in snap.rows if r.applied_at][-10:][::-1],
        }

    def chart_of(snap: Snapshot, name: str) -> views.Chart:
        """The throughput chart over the run's own time: from its start to its stop, or to this poll's read."""
        detail, report = snap.details.get(name), snap.report(name)
        if detail is None or report is None:
            return views.chart(detail.samples if detail else [])
        return views.chart(detail.samples, started=report.started_at, stopped=report.stopped_at or snap.read_at)

    def migration_context(snap: Snapshot, name: str) -> dict[str, Any]:
        detail = snap.details.get(name)
        return {
            "snap": snap,
            "name": name,
            "report": snap.report(name),
            "detail": detail,
            "chart": chart_of(snap, name),
            "verdict": views.verdicts(snap.audit).get(name, "ok"),
            # Drift and verify: the audit's read-only probe of this migration (``background.drift``, stranded
            # documents, ...) and the live watcher of its collection.
            "findings": [f for f in snap.audit.findings if f.subject == name] if snap.audit is not None else [],
            "audited_at": snap.audit.checked_at if snap.audit is not None else None,
            "watcher": views.watcher_of(snap.watchers, snap.report(name)),
        }

    async def overview(request: Request) -> Response:
        snap = await (await dashboard.poller()).current()
        return page(request, "overview.html", overview_context(snap))

    async def migration(request: Request) -> Response:
        name = _file_name(request.path_params["name"])
        snap = await (await dashboard.poller()).current(name)
        if snap.read_at is None:  # not "not registered": nothing is known
            return unread(request, snap)
        if snap.report(name) is None:
            return page(request, "error.html", {"message": f"{name} is not a registered background migration"}, 404)
        return page(request, "migration.html", migration_context(snap, name))

    async def run(request: Request) -> Response:
        """One run's stored ``ctx.log`` lines, in order, with their level (read on request: a run's log only grows)."""
        run_id = request.path_params["run_id"]
        poller = await dashboard.poller()
        snap = await poller.current()
        if snap.read_at is None:  # not "no run with this id": nothing is known
            return unread(request, snap)
        files = [row for row in snap.rows if row.run_id == run_id]
        if poller.ms is None:  # a project of tenants only (the session is open: the read succeeded)
            lines: list[api.RunLogLine] = []
        else:
            try:
                lines = await poller.ms.run_log(run_id)
            except MongoshiftError as exc:
                if exc.exit_code != ExitCode.CONFIG_INVALID:
                    return page(request, "error.html", {"message": f"the run's log could not be read: {exc.message}"}, 503)
                lines = []  # not a run id at all
        if not lines and not files:
            return page(request, "error.html", {"message": "no run with this id has stored log lines (unknown, or its lines have expired)"}, 404)
        return page(request, "run.html", {"run_id": run_id, "lines": lines, "files": files, "read_at": datetime.now(UTC)})

    async def events(request: Request) -> Response:
        """The live part of one page, re-rendered at each poll, as server-sent events (``event: update``)."""
        name = request.query_params.get("name")
        wanted = _file_name(name) if name else None
        poller = await dashboard.poller()
        if wanted:
            # As the migration's page: an unknown name is a 404 (a browser's EventSource then stops), not a stream
            # of empty updates; while nothing was read yet it streams, and the first read tells.
            snap = await poller.current(wanted)
            if snap.read_at is not None and snap.report(wanted) is None:
                return page(request, "error.html", {"message": f"{wanted} is not a registered background migration"}, 404)
        fragment = templates.get_template("_migration_live.html" if wanted else "_overview_live.html")

        async def stream() -> AsyncIterator[str]:
            async with poller.listening(wanted):
                after = 0  # tick 0 is the empty snapshot before the first read
                while (snap := await poller.next(after)) is not None:
                    after = snap.tick
                    context = migration_context(snap, wanted) if wanted else overview_context(snap)
                    html = fragment.render({"request": request, "options": options, **context})
                    yield "event: update\n" + "".join(f"data: {line}\n" for line in html.splitlines()) + "\n"

        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)

    async def refused(request: Request, why: str, status: int = 403) -> Response:
        return page(request, "error.html", {"message": why}, status)

    async def form_of(request: Request) -> dict[str, str] | Response:
        """A POST's text fields, or the refusal (400, a page with its headers) of a body that is no readable form
        (a malformed multipart body, a part too large): Starlette's own answer was a bare text without them."""
        try:
            fields = await request.form()
        except HTTPException as exc:
            return await refused(request, f"refused: the request's form could not be read ({exc.detail})", 400)
        return {k: v for k, v in fields.items() if isinstance(v, str)}

    async def checked_post(request: Request) -> tuple[dict[str, str], str] | Response:
        """The form of a control POST and its operator, or the refusal (403): read-only, cross-site, CSRF, no operator."""
        if options.read_only:
            return await refused(request, "this dashboard is read-only: controls are refused")
        form = await form_of(request)
        if isinstance(form, Response):
            return form
        if Guard.cross_site(request) or not (guard.bearer(request) or Guard.csrf_ok(request, form.get("csrf"))):
            if not Guard.cross_site(request) and Guard.bearer_sent(request):
                # a script's wrong token: "reload the page" (the CSRF refusal) sent it looking for a page it never had
                return await refused(request, "refused: that is not the dashboard token")
            return await refused(request, "refused: the form did not come from this dashboard (CSRF check); reload the page and try again")
        who = await guard.operator(request)
        if who is None:
            return await refused(request, f"refused: {_who_may_steer(guard)}")
        return form, who

    async def control(request: Request) -> Response:
        checked = await checked_post(request)
        if isinstance(checked, Response):
            return checked
        form, who = checked
        name = _file_name(request.path_params["name"])
        action = form.get("action", "")
        if action not in CONTROLS:
            return await refused(request, f"unknown control {action!r}", 400)
        if CONTROLS[action] and form.get("confirm") != "yes":
            return await refused(request, f"{action} asks for a confirmation: tick the box and send it again", 400)
        reason = (form.get("reason") or "").strip() or None

        async def act(ms: api.Mongoshift) -> str:
            if action == "retry-from-start":
                result = await ms.background.control(name, "retry", reason=reason, from_start=True)
            else:
                result = await ms.background.control(name, action, reason=reason)  # type: ignore[arg-type]  # checked against CONTROLS above
            return f"{action}: {'done' if result.applied == 'applied' else 'unchanged'}; now {result.status}"

        return await _acted(request, dashboard, who, act, name)

    async def throttle(request: Request) -> Response:
        checked = await checked_post(request)
        if isinstance(checked, Response):
            return checked
        form, who = checked
        name = _file_name(request.path_params["name"])
        clear = form.get("clear") == "yes"
        try:
            batch_size = _whole(form.get("batch_size"))
            pause_ms = _whole(form.get("pause_ms"))
        except ValueError:
            return await refused(request, "throttle: the batch size and the pause are whole numbers", 400)
        reason = (form.get("reason") or "").strip() or None

        async def act(ms: api.Mongoshift) -> str:
            api.check_throttle(batch_size, pause_ms, clear=clear, names=THROTTLE_FIELDS)  # its refusal names this form's fields
            result = await ms.background.throttle(name, batch_size=batch_size, pause_ms=pause_ms, clear=clear, reason=reason)
            return f"throttle: {'done' if result.applied == 'applied' else 'unchanged'}; pace now {result.pace}"

        return await _acted(request, dashboard, who, act, name)

    async def unlock(request: Request) -> Response:
        checked = await checked_post(request)
        if isinstance(checked, Response):
            return checked
        form, who = checked
        if form.get("confirm") != "yes":
            return await refused(request, "unlock asks for a confirmation: tick the box and send it again", 400)

        async def act(ms: api.Mongoshift) -> str:
            held = await ms.unlock()
            return "unlock: the lock was cleared" if held else "unlock: nothing to clear"

        return await _acted(request, dashboard, who, act, None)

    async def failed_ids(request: Request) -> Response:
        """The ids of failed documents, shown once to an operator who asked (never stored, logged or cached)."""
        checked = await checked_post(request)
        if isinstance(checked, Response):
            return checked
        name = _file_name(request.path_params["name"])
        poller = await dashboard.poller()
        try:
            ms = await dashboard.session()
        except (MongoshiftError, PyMongoError) as exc:
            return await refused(request, f"The last read failed: could not connect: {described(exc)}", 503)
        if ms is None:
            return await refused(request, f"{name} is not a registered background migration", 404)
        try:
            ids, total = await ms.background.failed_ids(name, limit=IDS_SHOWN)
        except NotAppliedError as exc:  # as the page of a migration not registered answers
            return await refused(request, exc.message, 404)
        except MongoshiftError as exc:
            return await refused(request, exc.message, 409)
        snap = await poller.current(name)
        return page(request, "migration.html", {**migration_context(snap, name), "ids": [views.shown_id(i) for i in ids], "ids_total": total})

    async def sign_in(request: Request) -> Response:
        form = await form_of(request)
        if isinstance(form, Response):
            return form
        if Guard.cross_site(request) or not (guard.bearer(request) or Guard.csrf_ok(request, form.get("csrf"))):
            return await refused(request, "refused: the form did not come from this dashboard (CSRF check); reload the page and try again")
        if not guard.token_matches(form.get("token")):
            return await refused(request, "refused: that is not the dashboard token")
        response = RedirectResponse(_local_path(request, form.get("next")) or path_for(request, "overview"), status_code=303)
        response.set_cookie(HOLDER_COOKIE, guard.holder_cookie(), httponly=True, samesite="strict", path=_cookie_path(request))
        return response

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await dashboard.aclose()

    routes = [
        Route("/", overview, name="overview"),
        Route("/migrations/{name}", migration, name="migration"),
        Route("/runs/{run_id}", run, name="run"),
        Route("/events", events, name="events"),
        Route("/sign-in", sign_in, methods=["POST"], name="sign_in"),
        Route("/migrations/{name}/control", control, methods=["POST"], name="control"),
        Route("/migrations/{name}/throttle", throttle, methods=["POST"], name="throttle"),
        Route("/migrations/{name}/failed-ids", failed_ids, methods=["POST"], name="failed_ids"),
        Route("/unlock", unlock, methods=["POST"], name="unlock"),
        Mount("/static", app=StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    async def no_route(request: Request, exc: Exception) -> Response:
        """What the router itself refuses (a path with no page, a method the address does not take), as the
        dashboard's own page with its headers: Starlette's answer was a bare text without them."""
        assert isinstance(exc, HTTPException)
        if exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow", "")
            response = page(request, "error.html", {"message": f"{request.method} is not allowed here (this address takes {allowed})"}, 405)
            response.headers["Allow"] = allowed
            return response
        return page(request, "error.html", {"message": "the dashboard has no page at this address"}, exc.status_code)

    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={404: no_route, 405: no_route})
    app.state.dashboard = dashboard
    app.state.templates = templates
    return app


def _who_may_steer(guard: Guard) -> str:
    """What a control needs on this dashboard, in the refusal of one sent without it: the sign-in it offers, not one
    it does not have (a dashboard without a token shows no sign-in form; ``mongoshift dashboard`` mounts nothing)."""
    if guard.token is not None and guard.identity is not None:
        return "controls need the dashboard token (sign in) or the mounting application's sign-in"
    if guard.token is not None:
        return "controls need the dashboard token: sign in with it (the Token field at the top of the page)"
    if guard.identity is not None:
        return "controls need the mounting application's sign-in (this dashboard takes no token)"
    return "this dashboard was made with neither a token nor an identity, so nobody may steer from it"


def _check_options(*, client: object, token: object, identity: object, read_only: object, poll_seconds: object) -> None:
    """``create_app``'s arguments, refused at once (exit 6) rather than taken as given: a poll of 0, a negative one or
    NaN read the project in a loop without a pause, ``read_only="no"`` was read for its truth, a text as ``identity``
    named nobody (calling it raised on every control), and another ``client`` or ``token`` failed later."""
    if isinstance(poll_seconds, bool) or not isinstance(poll_seconds, (int, float)) or not math.isfinite(poll_seconds) or poll_seconds <= 0:
        raise ConfigInvalidError(f"poll_seconds must be a number of seconds above 0, not {poll_seconds!r}")
    if not isinstance(read_only, bool):
        raise ConfigInvalidError(f"read_only must be True or False, not {type(read_only).__name__}")
    if identity is not None and not callable(identity):
        raise ConfigInvalidError(f"identity must be a function of the request (or None), not {type(identity).__name__}")
    if token is not None and not isinstance(token, str):
        raise ConfigInvalidError(f"token must be a text (or None), not {type(token).__name__}")  # never the value: a secret
    if client is not None and not isinstance(client, AsyncMongoClient):
        raise ConfigInvalidError(f"client must be a pymongo AsyncMongoClient (or None), not {type(client).__name__}")


def path_for(request: Request, name: str, /, **params: Any) -> URL:
    """A route's path (the mount's prefix included), never an absolute URL: Starlette's ``url_for`` takes the
    scheme and host from the request's own ``Host`` header, which a link or a redirect must not repeat."""
    return URL(request.url_for(name, **params).path)


@pass_context
def _template_path_for(context: Mapping[str, Any], name: str, /, **params: Any) -> URL:
    return path_for(context["request"], name, **params)


async def _acted(
    request: Request, dashboard: Dashboard, who: str, act: Callable[[api.Mongoshift], Awaitable[str]], name: str | None
) -> Response:
    """Run a control as ``who``; back to its page (303) with what it did, or the page with the API's refusal (its
    one-line message; a session that could not be opened is one: exit 5 when the server is down)."""
    target = path_for(request, "migration", name=name) if name else path_for(request, "overview")
    page = name or target.path  # what _page_of says of the page the redirect opens
    try:
        said = await act(await dashboard.steer(who))
    except MongoshiftError as exc:
        said = f"refused (exit {int(exc.exit_code)}): {exc.message}"
    except PyMongoError as exc:
        said = f"failed: {described(exc)}"
    poller = await dashboard.poller()
    await poller.refresh(extra=name)  # the page shows the control's effect at once
    return RedirectResponse(target.include_query_params(said=said, sig=dashboard.guard.sign(said, page)), status_code=303)


def _page_of(request: Request) -> str:
    """The page a signed message is for: a migration's file name (its page by either spelling), else the path
    (the overview's, with the mount's prefix). A path starts with ``/``, a file name never does."""
    name = request.path_params.get("name")
    return _file_name(name) if name else request.url.path


def _file_name(name: str) -> str:
    return name if name.endswith(".py") else f"{name}.py"


def _whole(value: str | None) -> int | None:
    """A form's whole number: ASCII digits with an optional sign (``int`` alone also takes underscores and
    any script's digits, so a pasted or auto-formatted value would be read as a number nobody typed)."""
    value = (value or "").strip()
    if not value:
        return None
    if not (value.lstrip("+-").isascii() and value.lstrip("+-").isdigit()) or len(value) - len(value.lstrip("+-")) > 1:
        raise ValueError(value)
    return int(value)


def _back_to(request: Request) -> str | None:
    """The page a sign-in from this one goes back to: a migration's (its page, or a control refused on it), the page
    itself when it was a GET, else none (the overview)."""
    name = request.path_params.get("name")
    if name:
        return path_for(request, "migration", name=_file_name(name)).path
    return request.url.path if request.method == "GET" else None


def _local_path(request: Request, path: str | None) -> str | None:
    """``path`` when it is a path of this dashboard (under its mount), else None: a sign-in never sends the browser
    to another host (``//host/``, ``https://``) or another application's path."""
    if not path or not path.startswith(_cookie_path(request)) or path.startswith("//") or "\\" in path:
        return None
    parts = urlsplit(path)
    return path if not parts.scheme and not parts.netloc else None


def _cookie_path(request: Request) -> str:
    return str(request.scope.get("root_path") or "") + "/"


def _harden(response: Response) -> None:
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Content-Security-Policy"] = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'"
