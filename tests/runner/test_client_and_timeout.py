"""The application's own client (issue 14 item 4) and a file's ``timeout_seconds`` (item 5)."""

from __future__ import annotations

import pytest

from mongoshift import api
from mongoshift.errors import (
    ConfigInvalidError,
    InvalidExportError,
    MigrationTimeoutError,
    UriUnavailableError,
)
from mongoshift.project.connection import connect, sync_client
from mongoshift.project.loader import discover, load
from mongoshift.project.settings import load_settings

from ..conftest import with_app_name

ASYNC = "async def up(ctx):\n    await ctx.db.items.insert_one({'n': 1})\n\nasync def down(ctx):\n    await ctx.db.items.delete_many({})\n"


async def test_every_call_runs_on_the_given_client_and_leaves_it_open(project, db, client) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", ASYNC)
    # no uri at all: the client is the connection
    s = load_settings({"db": project.db, "migrations_dir": str(project.migrations)}, config_path=None, environ={})
    assert s.uri is None

    assert [r.name for r in (await api.dry_run(s, "up", client=client)).rows] == ["0001_a.py"]
    assert [r.status for r in (await api.up(s, client=client)).results] == ["applied"]
    assert [r.state for r in await api.status(s, client=client)] == ["applied"]
    assert [r.name for r in await api.list_migrations(s, client=client, only="applied")] == ["0001_a.py"]
    assert await api.lock_status(s, client=client) is None and await api.unlock(s, client=client) is None
    assert (await api.audit(s, client=client)).verdict == "ok"
    assert (await api.plan_converge(s, client=client)).results == []
    assert (await api.converge(s, client=client)).success
    assert await api.background_status(s, client=client) == []
    assert await api.run_background(s, client=client) == []
    assert await api.verify_background(s, client=client) == []
    assert await api.background_watch_status(s, client=client) == []
    assert (await api.baseline(s, "0001_a.py", client=client)).adopted == []  # already applied: nothing to record
    assert [r.status for r in (await api.redo(s, client=client)).results] == ["reverted", "applied"]
    assert [r.status for r in (await api.down(s, client=client)).results] == ["reverted"]

    assert (await client.admin.command("ping"))["ok"] == 1  # still open
    assert await db.items.count_documents({}) == 0


async def test_a_plain_def_on_a_client_without_a_uri_is_refused_before_anything_runs(project, db, client) -> None:  # type: ignore[no-untyped-def]
    """A plain def body needs the sync driver, so the URI: refused up front (6), not failed and recorded inside the body."""
    project.add("0001_a.py", ASYNC)
    project.add("0002_b.py", "def up(ctx):\n    ctx.db.items.insert_one({'n': 2})\n")
    s = load_settings({"db": project.db, "migrations_dir": str(project.migrations)}, config_path=None, environ={})
    with pytest.raises(ConfigInvalidError, match=r"needs the server's URI.*0002_b\.py"):
        await api.up(s, client=client)
    assert await db["_mongoshift_migrations"].count_documents({}) == 0 and await db.items.count_documents({}) == 0


@pytest.mark.parametrize("name", ["billing-migrations", None])
async def test_the_uri_s_app_name_is_kept_and_mongoshift_is_the_default(project, name: str | None) -> None:  # type: ignore[no-untyped-def]
    """Operators filter the server's log and currentOp by appName, and a fail point can target it:
    a keyword option would override the URI's, so mongoshift's default applies only without one."""
    settings = project.settings(uri=with_app_name(project.uri, name))
    client = await connect(settings)
    try:
        assert client.options.pool_options.metadata["application"] == {"name": name or "mongoshift"}
    finally:
        await client.close()
    blocking = sync_client(settings)
    try:
        assert blocking.options.pool_options.metadata["application"] == {"name": name or "mongoshift"}
    finally:
        blocking.close()


async def test_a_client_that_is_not_an_async_client_is_refused(project) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigInvalidError, match="AsyncMongoClient"):
        await api.up(project.settings(), client="mongodb://x")  # type: ignore[arg-type]
    with pytest.raises(ConfigInvalidError, match="observers"):
        await api.up(project.settings(), observers=print)  # type: ignore[arg-type]


async def test_a_file_timeout_overrides_the_setting(project, db) -> None:  # type: ignore[no-untyped-def]
    project.write_config(migration_timeout_seconds=0.2)
    project.add("0001_patient.py", "import asyncio\ntimeout_seconds = 30\n\nasync def up(ctx):\n    await asyncio.sleep(0.4)\n")
    project.add("0002_unbounded.py", "import asyncio\ntimeout_seconds = None\n\nasync def up(ctx):\n    await asyncio.sleep(0.4)\n")
    project.add("0003_hasty.py", "import asyncio\ntimeout_seconds = 0.2\n\nasync def up(ctx):\n    await asyncio.sleep(30)\n")
    s = project.settings()
    with pytest.raises(MigrationTimeoutError, match=r"0003_hasty\.py ran longer than 0\.2s") as failure:
        await api.up(s)
    assert [r["status"] for r in failure.value.details["results"]] == ["applied", "applied", "failed"]

    project.write_config()  # no global limit: the file's own still holds
    with pytest.raises(MigrationTimeoutError):
        await api.up(project.settings())


@pytest.mark.parametrize("value", ["'10'", "0", "-1", "True", "float('nan')", "86401"])
def test_a_bad_timeout_is_the_file_s_load_error(tmp_path, value: str) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "0001_bad.py").write_text(f"timeout_seconds = {value}\n\ndef up(ctx):\n    pass\n")
    with pytest.raises(InvalidExportError, match=r"0001_bad\.py: timeout_seconds must be a number of seconds") as failure:
        load(discover(tmp_path)[0])
    assert failure.value.exit_code == 20


def test_a_background_file_takes_no_timeout(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "0001_bg.py").write_text(
        "from mongoshift import Background\n\ntimeout_seconds = 5\n"
        "def migrate(doc):\n    return doc\n\n"
        "background = Background(collection='users', from_version=1, to_version=2, migrate=migrate)\n"
    )
    with pytest.raises(InvalidExportError, match="timeout_seconds bounds an up/down body"):
        load(discover(tmp_path)[0])


async def test_a_plain_def_on_a_client_fetches_the_uri_from_uri_factory_before_it_runs(project, db, client, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The application's client is the connection, so the URI is not fetched for it; plain def code needs it for
    the sync driver: ``uri_factory`` runs once, before the first body, and a failing one stops the run there."""
    module = f"client_uri_{tmp_path.name.replace('-', '_')}"
    calls = tmp_path / "calls"
    (tmp_path / f"{module}.py").write_text(
        "from pathlib import Path\n\n"
        f"CALLS = Path({str(calls)!r})\n\n"
        "def mongo_uri():\n"
        "    CALLS.write_text(CALLS.read_text() + 'x' if CALLS.exists() else 'x')\n"
        f"    return {project.uri!r}\n\n"
        "def broken():\n"
        "    raise RuntimeError('vault is down')\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    project.add("0001_a.py", ASYNC)
    project.add("0002_b.py", "def up(ctx):\n    ctx.db.items.insert_one({'n': 2})\n")

    def settings(factory: str):  # type: ignore[no-untyped-def]
        return load_settings({"db": project.db, "migrations_dir": str(project.migrations), "uri_factory": f"{module}:{factory}"}, config_path=None, environ={})

    with pytest.raises(UriUnavailableError):
        await api.up(settings("broken"), client=client)
    assert await db["_mongoshift_migrations"].count_documents({}) == 0 and await db.items.count_documents({}) == 0

    assert [r.status for r in (await api.up(settings("mongo_uri"), client=client)).results] == ["applied", "applied"]
    assert sorted(d["n"] for d in await db.items.find().to_list()) == [1, 2]
    assert calls.read_text() == "x"  # once, for the plain def

    project.add("0003_c.py", ASYNC.replace("'n': 1", "'n': 3"))
    assert [r.status for r in (await api.up(settings("mongo_uri"), client=client)).results] == ["applied"]
    assert calls.read_text() == "x"  # async code only: the client is enough, nothing fetched
