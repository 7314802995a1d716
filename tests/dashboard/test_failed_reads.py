"""The dashboard when a read fails: it says so, and never shows what it could not read as if it were the project's state.

A page shows what the last successful read found, with the failure beside it; what was never read is said to be
unread, never an empty project ("no migration files", "Lock: free"). The server down (or the credentials refused)
when the dashboard starts is such a failure too: the pages say it, and each later read tries to connect again.
"""

from __future__ import annotations

import json
import logging
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mongoshift.api import Mongoshift
from mongoshift.errors import ServerError

from .conftest import NAME, TOKEN, WAIT_S, Served, csrf_of, first_events, make_app

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

#: What an empty snapshot shown as the project's state would say: facts the dashboard does not know after a failed read.
UNKNOWN_AS_FACT = ("no migration files", "Lock: free", "No background migration is registered")
#: A password in the unreachable server's URI: never on a page, in an event or in the log.
SECRET = "pw-never-shown-7f3a"
#: A server that refuses connections at once (nothing listens on port 1).
UNREACHABLE = f"mongodb://deploy:{SECRET}@127.0.0.1:1/?connectTimeoutMS=2000"


def switchable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str) -> Any:
    """A module of the project (a ``uri_factory``, a tenants ``provider``) whose ``DOWN`` the test switches; its module object."""
    name = f"dashboard_source_{uuid.uuid4().hex[:12]}"  # its own module: another test's may still be imported
    (tmp_path / f"{name}.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    __import__(name)
    return sys.modules[name]


@pytest.fixture
def tenant_names(registered, sync_client) -> Iterator[list[str]]:  # type: ignore[no-untyped-def]
    """Two tenant databases of the test server (a status read creates nothing; dropped in case a later release does)."""
    names = [registered.db + "_t0", registered.db + "_t1"]
    yield names
    for name in names:
        sync_client.drop_database(name)


async def test_a_failing_tenants_read_is_shown_as_such_and_the_line_lock_and_background_still_are(
    registered, counted_client, http, tenant_names: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch  # type: ignore[no-untyped-def]
) -> None:
    provider = switchable(
        tmp_path, monkeypatch,
        "DOWN = True\n\n\ndef tenants(settings):\n"
        "    if DOWN:\n        raise RuntimeError('the tenant directory is down')\n"
        f"    return {tenant_names!r}\n",
    )
    with registered.config.open("a", encoding="utf-8") as config:
        config.write(f'[mongoshift.tenants]\nprovider = "{provider.__name__}:tenants"\n')
    client, _ = counted_client
    app = make_app(registered, client)
    web = http(app)
    page = await web.get("/")
    assert page.status_code == 200, page.text
    # The line, the lock and the background migrations were read: they are shown (without the fix: an empty project).
    assert "applied 1" in page.text and f'data-name="{NAME}"' in page.text and "Lock: free" in page.text
    assert "no migration files" not in page.text and "No background migration is registered" not in page.text
    assert "The last read failed" not in page.text  # the project's own reads did not fail
    # The tenants' read failed: their section says so (what failed, not a count it does not know).
    failed = page.text[page.text.index('data-testid="tenants-read-failed"'):]
    assert "the tenant directory is down" in failed[: failed.index("</p>")]
    assert 'data-testid="tenants-up-to-date"' not in page.text
    (event,) = await first_events(app, "/events")
    assert 'data-testid="tenants-read-failed"' in event and "applied 1" in event

    provider.DOWN = False  # the directory answers again: the next poll reads the tenants
    snap = await (await app.state.dashboard.poller()).refresh()
    assert snap.tenants is not None and snap.tenants.total == 2 and snap.tenants_error is None
    page = await web.get("/")
    assert 'data-testid="tenants-read-failed"' not in page.text and "2 tenants" in page.text and "applied 1" in page.text


async def test_a_first_read_that_fails_says_so_instead_of_showing_an_empty_project(
    registered, counted_client, http, monkeypatch: pytest.MonkeyPatch  # type: ignore[no-untyped-def]
) -> None:
    refused = {"now": True}
    reads_status = Mongoshift.status

    async def status(self: Mongoshift, **options: Any) -> Any:  # the server refuses the read (a role without find, say)
        if refused["now"]:
            raise ServerError("not authorized to read the changelog (13 Unauthorized)")
        return await reads_status(self, **options)

    monkeypatch.setattr(Mongoshift, "status", status)
    client, _ = counted_client
    app = make_app(registered, client)
    web = http(app)
    page = await web.get("/")
    assert page.status_code == 200, page.text
    assert "The last read failed" in page.text and "13 Unauthorized" in page.text
    assert 'data-testid="not-read"' in page.text
    assert not [fact for fact in UNKNOWN_AS_FACT if fact in page.text], page.text
    (event,) = await first_events(app, "/events")
    assert "The last read failed" in event and not [fact for fact in UNKNOWN_AS_FACT if fact in event]
    migration = await web.get(f"/migrations/{NAME}")  # not "not a registered background migration": it is not known
    assert migration.status_code == 503 and "The last read failed" in migration.text and "not a registered" not in migration.text

    refused["now"] = False
    snap = await (await app.state.dashboard.poller()).refresh()
    assert snap.error is None and snap.read_at is not None
    page = await web.get("/")
    assert "The last read failed" not in page.text and "applied 1" in page.text and f'data-name="{NAME}"' in page.text


def server_down_at_start(project: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``project`` with its URI from a factory that gives an unreachable server (with a password) while ``DOWN``; the factory's module."""
    factory = switchable(
        tmp_path, monkeypatch, f"DOWN = True\n\n\ndef mongo_uri():\n    return {UNREACHABLE!r} if DOWN else {project.uri!r}\n"
    )
    project.config.write_text(
        f'[mongoshift]\nuri_factory = "{factory.__name__}:mongo_uri"\ndb = {json.dumps(project.db)}\nmigrations_dir = "migrations"\n',
        encoding="utf-8",
    )
    return factory


async def test_a_server_down_at_start_is_shown_on_every_page_and_each_poll_connects_again(
    registered, http, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture  # type: ignore[no-untyped-def]
) -> None:
    factory = server_down_at_start(registered, tmp_path, monkeypatch)
    caplog.set_level(logging.INFO, logger="mongoshift.dashboard")
    app = make_app(registered, None)  # the dashboard opens its own client (without the fix: the request raises)
    web = http(app)
    page = await web.get("/")
    assert page.status_code == 200, page.text
    banner = page.text[page.text.index("The last read failed"):]
    banner = banner[: banner.index("</p>")]
    assert "connection_failed" in banner and "127.0.0.1:1" in banner
    assert not [fact for fact in UNKNOWN_AS_FACT if fact in page.text], page.text
    (event,) = await first_events(app, "/events")
    assert "connection_failed" in event and not [fact for fact in UNKNOWN_AS_FACT if fact in event]
    migration = await web.get(f"/migrations/{NAME}")
    assert migration.status_code == 503 and "connection_failed" in migration.text
    run = await web.get("/runs/some-run")
    assert run.status_code == 503 and "connection_failed" in run.text
    csrf = csrf_of(page.text)
    steered = await web.post(f"/migrations/{NAME}/control", data={"csrf": csrf, "action": "pause"}, headers={"authorization": f"Bearer {TOKEN}"})
    assert steered.status_code == 303
    shown = await web.get(steered.headers["location"])
    assert "refused (exit 5)" in shown.text  # the control's own answer: it could not connect
    poller = await app.state.dashboard.poller()
    for _ in range(3):  # each read tries to connect again, and fails the same way: said once in the log
        assert (await poller.refresh()).error is not None
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and r.name == "mongoshift.dashboard"]
    assert len(warned) == 1, [r.getMessage() for r in warned]
    assert all(r.exc_info is None for r in caplog.records)  # no traceback
    for text in (page.text, event, migration.text, run.text, shown.text, caplog.text):
        assert SECRET not in text

    factory.DOWN = False  # the server is up: the next poll connects and reads
    snap = await poller.refresh()
    assert snap.error is None and snap.read_at is not None and snap.report(NAME) is not None
    page = await web.get("/")
    assert "The last read failed" not in page.text and "applied 1" in page.text and f'data-name="{NAME}"' in page.text
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.INFO] == ["the dashboard reads the project again"]


async def test_a_served_dashboard_whose_server_is_down_answers_its_pages_without_a_traceback(
    registered, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]  # type: ignore[no-untyped-def]
) -> None:
    """As ``mongoshift dashboard`` serves it: a page, not a bare 500, and nothing on stderr but one warning."""
    from mongoshift.dashboard import create_app

    server_down_at_start(registered, tmp_path, monkeypatch)
    async with Served(create_app(registered.settings(), token=TOKEN, poll_seconds=0.2)) as dash:
        async with httpx.AsyncClient(base_url=dash.url, timeout=WAIT_S) as web:
            page = await web.get("/")
            again = await web.get("/")
    assert page.status_code == again.status_code == 200, page.text
    assert "The last read failed" in page.text and "connection_failed" in page.text
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception in ASGI application" not in err, err
    assert SECRET not in err
