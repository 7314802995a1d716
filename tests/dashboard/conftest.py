"""Fixtures of the dashboard's tests: a project with a registered background migration, the app on it, an HTTP client."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import httpx
import pytest
from pymongo import AsyncMongoClient, MongoClient, monitoring

from mongoshift.api import Tenants, migrations as command, up_across

from ..background.conftest import background_file, seed
from ..tenants.conftest import TenantProject, tenant_project  # noqa: F401  (the fixture, for the tenants view's tests)

NAME = "0001_names.py"
TOKEN = "a-dashboard-token-for-tests"
#: The bound on each wait of the served tests (a state, a close, a shutdown): generous, as the machine may be
#: loaded; it only turns a wait that would never end into a failure that says what was waited for.
WAIT_S = 60.0


class Reads(monitoring.CommandListener):
    """Counts the commands a client sends that read (what "N viewers ≠ N× reads" is measured in)."""

    READS = frozenset({"find", "aggregate", "count", "countDocuments", "distinct", "getMore", "listIndexes", "listCollections"})

    def __init__(self) -> None:
        self.count = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name in self.READS:
            self.count += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.fixture
def fast_project(project):  # type: ignore[no-untyped-def]
    """A project with short background timings (as the background tests' own)."""
    project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.2)
    return project


@pytest.fixture
async def registered(fast_project, db):  # type: ignore[no-untyped-def]
    """A project whose background migration of 300 documents is registered (pending, no runner)."""
    await seed(db.people, 300)
    fast_project.add(NAME, background_file(batch_size=50, extra="adaptive=False,"))
    await command.up(fast_project.settings())
    return fast_project


@pytest.fixture
async def counted_client(mongo_uri: str) -> AsyncIterator[tuple[AsyncMongoClient[Any], Reads]]:
    reads = Reads()
    client: AsyncMongoClient[Any] = AsyncMongoClient(mongo_uri, event_listeners=[reads])
    yield client, reads
    await client.close()


def make_app(project, client, **options):  # type: ignore[no-untyped-def]
    from mongoshift.dashboard import create_app

    options.setdefault("token", TOKEN)
    options.setdefault("poll_seconds", 0.05)
    return create_app(project.settings(), client=client, **options)


@pytest.fixture
async def http():  # type: ignore[no-untyped-def]
    """``http(app)``: an httpx client on the app (same event loop, cookies kept); closes the apps it opened."""
    apps: list[Any] = []
    clients: list[httpx.AsyncClient] = []

    def open_(app: Any, *, base: str = "http://dash.test") -> httpx.AsyncClient:
        apps.append(app)
        c = httpx.AsyncClient(transport=httpx.ASGITransport(app=app, client=("127.0.0.1", 40000)), base_url=base, follow_redirects=False)
        clients.append(c)
        return c

    yield open_
    for c in clients:
        await c.aclose()
    for app in apps:
        dashboard = getattr(app.state, "dashboard", None)
        if dashboard is not None:
            await dashboard.aclose()


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "the page has no CSRF field"
    return found.group(1)


async def sign_in(client: httpx.AsyncClient, path: str = "/") -> str:
    """Open ``path``, sign in with the token; the page's CSRF value."""
    page = await client.get(path)
    csrf = csrf_of(page.text)
    answer = await client.post(path.rstrip("/") + "/sign-in" if path != "/" else "/sign-in", data={"csrf": csrf, "token": TOKEN})
    assert answer.status_code == 303, answer.text
    return csrf


async def first_events(app: Any, path: str, count: int = 1, statuses: list[int] | None = None) -> list[str]:
    """The first ``count`` server-sent events of ``path``, read through the ASGI interface, then a disconnect
    (the response's status appended to ``statuses`` when given)."""
    received: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    disconnect = asyncio.Event()
    chunks: list[str] = []
    enough = asyncio.Event()
    raw_path, _, query = path.partition("?")
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
        "path": raw_path, "raw_path": raw_path.encode(), "query_string": query.encode(), "root_path": "",
        "headers": [(b"host", b"dash.test")], "client": ("127.0.0.1", 40001), "server": ("dash.test", 80),
    }
    await received.put({"type": "http.request", "body": b"", "more_body": False})

    async def receive() -> dict[str, Any]:
        if not received.empty():
            return await received.get()
        await disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start" and statuses is not None:
            statuses.append(message["status"])
        if message["type"] == "http.response.body":
            chunks.append(message.get("body", b"").decode())
            if "".join(chunks).count("\n\n") >= count:
                enough.set()

    task = asyncio.create_task(app(scope, receive, send))
    waiter = asyncio.create_task(enough.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    disconnect.set()
    await task
    waiter.cancel()
    return "".join(chunks).split("\n\n")[:count]


class Streams:
    """``n`` open event streams on one app, each reading events until closed."""

    def __init__(self, app: Any, path: str, n: int) -> None:
        self.app, self.path, self.n = app, path, n
        self.events = [0] * n
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def _one(self, i: int) -> None:
        raw, _, query = self.path.partition("?")
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http", "path": raw,
                 "raw_path": raw.encode(), "query_string": query.encode(), "root_path": "", "headers": [(b"host", b"dash.test")],
                 "client": ("127.0.0.1", 41000 + i), "server": ("dash.test", 80)}
        first = True

        async def receive() -> dict[str, Any]:
            nonlocal first
            if first:
                first = False
                return {"type": "http.request", "body": b"", "more_body": False}
            await self._stop.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                self.events[i] += 1

        await self.app(scope, receive, send)

    def open(self) -> None:
        self._tasks = [asyncio.create_task(self._one(i)) for i in range(self.n)]

    async def close(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)


async def reads_per_poll(app: Any, reads: Reads, path: str, viewers: int, polls: int = 4) -> float:
    """The read commands per poll over ``polls`` polls while ``viewers`` streams of ``path`` are open."""
    poller = await app.state.dashboard.poller()
    streams = Streams(app, path, viewers)
    streams.open()
    try:
        while poller.listeners < viewers:  # every stream is listening (each waits on the poller's condition)
            await poller.next(poller.snapshot.tick)
        start_tick = (await poller.next(poller.snapshot.tick)).tick
        before = reads.count
        await _until_tick(poller, start_tick + polls)
        return (reads.count - before) / polls
    finally:
        await streams.close()


async def _until_tick(poller: Any, tick: int) -> None:
    while poller.snapshot.tick < tick:
        await poller.next(poller.snapshot.tick)


FAILS_WHEN_TOLD = """
def up(ctx):
    if ctx.db.fail_here.find_one({}) is not None:
        raise RuntimeError("told to fail")
    ctx.db.done.insert_one({"file": "%s"})


def down(ctx):
    ctx.db.done.delete_many({})
"""


async def tenants_at_each_state(project: TenantProject, sync_client: MongoClient) -> tuple[list[str], str, str]:  # type: ignore[type-arg]
    """Two tenants up to date, one failed (its second file raised), one behind (nothing applied): up to date, failed, behind."""
    project.add("0001_a.py", FAILS_WHEN_TOLD % "0001")
    project.add("0002_b.py", FAILS_WHEN_TOLD % "0002")
    up_to_date, failed, behind = project.tenants[:2], project.tenants[2], project.tenants[3]
    report = await up_across(project.settings(), Tenants(names=up_to_date))
    assert all(row.ok for row in report.rows)
    report = await up_across(project.settings(), Tenants(names=[failed]), to="0001_a.py")
    assert report.rows[0].ok
    sync_client[failed].fail_here.insert_one({"why": "test"})
    report = await up_across(project.settings(), Tenants(names=[failed]))
    assert report.rows[0].outcome == "failed"
    return up_to_date, failed, behind


def awaiting(task: asyncio.Task[Any]) -> str:
    """Where ``task`` waits: its chain of awaited coroutines, outermost first (what a hang is diagnosed by)."""
    lines, step = [], task.get_coro()
    while step is not None and len(lines) < 60:
        frame = getattr(step, "cr_frame", None) or getattr(step, "gi_frame", None) or getattr(step, "ag_frame", None)
        lines.append(f"{frame.f_code.co_qualname} ({frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno})" if frame else repr(step)[:120])
        step = getattr(step, "cr_await", None) or getattr(step, "gi_yieldfrom", None) or getattr(step, "ag_await", None)
    return " > ".join(lines)


async def bounded[T](step: Awaitable[T], what: str, seconds: float = WAIT_S) -> T:
    """``await step``, failing after ``seconds`` with ``what`` and where every task of the loop waits (never a silent hang)."""
    try:
        async with asyncio.timeout(seconds):
            return await step
    except TimeoutError:
        tasks = "\n".join(f"  {t.get_name()}: {awaiting(t)}" for t in asyncio.all_tasks() if t is not asyncio.current_task())
        raise AssertionError(f"{what} did not end within {seconds:g} s; the loop's tasks wait at:\n{tasks}") from None


class Served:
    """A dashboard served by uvicorn on a free loopback port, in the test's event loop, as ``mongoshift dashboard``
    serves it (:func:`mongoshift.dashboard.serving.dashboard_server`: the open pages' streams end as the shutdown starts)."""

    def __init__(self, app: Any, *, port: int = 0, **config: Any) -> None:
        from mongoshift.dashboard.serving import dashboard_server

        self.app = app
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port served before (its connections closing)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config.setdefault("timeout_graceful_shutdown", 5)
        self.server = dashboard_server(app, log_level="warning", lifespan="on", **config)
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Served:
        self.task = asyncio.create_task(self.server.serve(sockets=[self.sock]))
        await bounded(self._started(), "the dashboard server's start")
        return self

    async def _started(self) -> None:
        assert self.task is not None
        while not self.server.started:
            if self.task.done():  # it could not start: its error, not a wait for ever
                self.task.result()
                raise AssertionError("the dashboard's server stopped before it started")
            await asyncio.sleep(0)  # a yield to the loop until uvicorn says it listens, not a timed wait

    async def stop(self) -> None:
        """Shut the server down and wait for it, bounded (a shutdown that never ends fails, saying where it waits)."""
        self.server.should_exit = True
        assert self.task is not None
        try:
            await bounded(asyncio.shield(self.task), "the dashboard server's shutdown")
        finally:
            self.sock.close()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def served(project: Any, *, port: int = 0, **options: Any) -> Served:
    """``create_app`` on ``project`` (the token, a 0.2 s poll), served (on ``port``: 0 picks one); ``config`` keywords go to uvicorn."""
    from mongoshift.dashboard import create_app

    config = options.pop("config", {})
    options.setdefault("token", TOKEN)
    return Served(create_app(project.settings(), poll_seconds=0.2, **options), port=port, **config)
