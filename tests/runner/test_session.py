"""The session API (issue 25, item 2): ``mongoshift.connect`` opens the project once (files scanned,
URI fetched, mongoshift's own collections checked) however many calls it serves, takes the
migration lock per writing call only, and refuses a wrong lock or confirmation value at once."""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import mongoshift
from mongoshift import api
from mongoshift.errors import ConfigInvalidError, LockHeldError
from mongoshift.project import session as project_session

from ..background.conftest import background_file, seed

LINE = """
async def up(ctx):
    await ctx.db.items.insert_one({"n": 1})

async def down(ctx):
    await ctx.db.items.delete_many({})
"""


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many times the project's parts were opened: the folder scanned, the own collections checked, a client connected."""
    seen: Counter[str] = Counter()

    def counted(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            seen[name] += 1
            return function(*args, **kwargs)

        return wrapper

    for name in ("discover", "check_own_collections", "connect"):
        monkeypatch.setattr(project_session, name, counted(name, getattr(project_session, name)))
    return seen


@pytest.fixture
def factory_project(project, tmp_path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """The project with its URI from a ``uri_factory`` that counts its calls in a file."""
    calls = tmp_path / "factory_calls"
    module = f"session_uri_{uuid.uuid4().hex[:12]}"  # its own module: another test's is still imported
    (tmp_path / f"{module}.py").write_text(
        "from pathlib import Path\n\n"
        f"CALLS = Path({str(calls)!r})\n\n"
        "def mongo_uri():\n"
        "    CALLS.write_text(str(int(CALLS.read_text() or 0) + 1) if CALLS.exists() else '1')\n"
        f"    return {project.uri!r}\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    project.config.write_text(
        f'[mongoshift]\nuri_factory = "{module}:mongo_uri"\ndb = {json.dumps(project.db)}\nmigrations_dir = "migrations"\n'
        "background_lease_ttl_seconds = 2\nbackground_poll_seconds = 0.2\n",
        encoding="utf-8",
    )
    project.factory_calls = lambda: int(calls.read_text()) if calls.exists() else 0
    return project


async def test_a_session_opens_the_project_once_however_many_calls_it_serves(factory_project, db, opened: Counter[str]) -> None:  # type: ignore[no-untyped-def]
    project = factory_project
    project.add("0001_items.py", LINE)
    project.add("0002_people.py", background_file(batch_size=10))
    await seed(db.people, 25)

    async with mongoshift.connect(project.settings()) as ms:
        assert [row.name for row in (await ms.plan()).rows] == ["0001_items.py", "0002_people.py"]
        report = await ms.up()
        assert [r.status for r in report.results] == ["applied", "applied"]
        assert await ms.lock_status() is None  # released when up returned
        (run,) = await ms.background.run(["0002_people.py"])
        assert run.status == "completed"
        assert [r.status for r in await ms.background.status()] == ["completed"]
        assert (await ms.collections.plan()).success
        assert (await ms.audit()).verdict in ("ok", "warn")
        assert [row.state for row in await ms.status()] == ["applied", "applied"]
        assert [r.name for r in (await ms.redo("0001_items.py")).results] == ["0001_items.py", "0001_items.py"]
        assert [r.name for r in (await ms.down("0001_items.py")).results] == ["0001_items.py"]
        assert [row.name for row in await ms.migrations("pending")] == ["0001_items.py"]
        assert await ms.unlock() is None

    # one scan of the folder, one URI fetch, one connection, one check of the own collections: for 13 calls
    assert (opened["discover"], project.factory_calls(), opened["connect"], opened["check_own_collections"]) == (1, 1, 1, 1)


async def test_the_flat_functions_open_the_project_per_call(factory_project, db, opened: Counter[str]) -> None:  # type: ignore[no-untyped-def]
    """The contrast that the session exists for: each one-shot call opens everything again."""
    project = factory_project
    project.add("0001_items.py", LINE)

    await api.status(project.settings())
    await api.up(project.settings())
    await api.status(project.settings())

    assert (opened["discover"], project.factory_calls(), opened["connect"], opened["check_own_collections"]) == (3, 3, 3, 3)


async def test_a_session_never_holds_the_lock_between_calls(project, db) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_items.py", LINE)
    settings = project.settings()

    async with mongoshift.connect(settings) as ms:
        await ms.up()
        # another process can take the lock while the session is open
        assert [r.status for r in (await api.down(settings)).results] == ["reverted"]
        assert await api.lock_status(settings) is None
        await ms.up(lock=mongoshift.Lock(wait=5))
        assert [row.state for row in await ms.status()] == ["applied"]


async def test_a_session_call_refused_the_lock_says_so_and_the_session_goes_on(project, db) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_items.py", LINE)
    settings = project.settings()
    held = {"_id": "migration_lock", "owner": "other", "nonce": "n", "host": "h", "pid": 1, "executed_by": "x", "ttl_ms": 600_000}
    await db["_mongoshift_locks"].insert_one({**held, "expires_at": datetime.now(UTC) + timedelta(minutes=10)})

    async with mongoshift.connect(settings) as ms:
        with pytest.raises(LockHeldError):
            await ms.up()
        assert [row.state for row in await ms.status()] == ["pending"]  # nothing recorded
        await ms.unlock()
        assert [r.status for r in (await ms.up()).results] == ["applied"]
        without = await ms.down(lock=mongoshift.Lock(take=False))
        assert [r.status for r in without.results] == ["reverted"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda ms: ms.up(lock=True), "lock must be a mongoshift Lock"),
        (lambda ms: ms.down(lock=mongoshift.Lock(wait=-1)), "Lock.wait must be a number of seconds"),
        (lambda ms: ms.collections.converge(confirm="yes"), "confirm must be True, False or an async function"),
    ],
    ids=["lock-not-a-Lock", "negative-wait", "confirm-not-bool-or-function"],
)
async def test_a_wrong_lock_or_confirmation_is_refused_before_anything_runs(project, db, call, message) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_items.py", LINE)
    async with mongoshift.connect(project.settings()) as ms:
        with pytest.raises(ConfigInvalidError) as refused:
            await call(ms)
        assert message in refused.value.message and refused.value.exit_code == 6
        assert [row.state for row in await ms.status()] == ["pending"]
    assert await db["_mongoshift_locks"].count_documents({}) == 0


async def test_a_session_on_the_applications_client_leaves_it_open(project, db, client) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_items.py", LINE)
    async with mongoshift.connect(project.settings(), client=client) as ms:
        await ms.up()
    assert (await client.admin.command("ping"))["ok"] == 1
    assert await db.items.count_documents({}) == 1


async def test_a_wrong_option_fails_when_the_session_opens(project) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigInvalidError):
        async with mongoshift.connect(project.settings(), client="mongodb://localhost"):  # type: ignore[arg-type]
            pass
    with pytest.raises(ConfigInvalidError):
        async with mongoshift.connect(project.settings(), observers=[print, "not a function"]):  # type: ignore[list-item]
            pass


def test_the_cli_reads_background_status_and_its_watchers_on_one_connection(project, opened: Counter[str], capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``background status`` makes two reads (the migrations, the live watchers): one session, one connection."""
    from mongoshift.cli.main import main

    project.add("0001_people.py", background_file())
    monkeypatch.chdir(project.root)
    for name in [n for n in os.environ if n.startswith("MONGOSHIFT_")]:
        monkeypatch.delenv(name)

    def run(*args: str) -> tuple[int, str]:
        capsys.readouterr()
        with pytest.raises(SystemExit) as stopped:
            main(list(args))
        return int(stopped.value.code or 0), capsys.readouterr().out

    assert run("up")[0] == 0
    opened.clear()
    code, stdout = run("background", "status", "--json")
    assert code == 0 and [r["status"] for r in json.loads(stdout)["background"]] == ["pending"]
    assert opened["connect"] == 1
