"""The session API (issue 25, item 2): ``mongoshift.connect`` opens the project once (files scanned,
URI fetched, mongoshift's own collections checked) however many calls it serves, takes the
migration lock per writing call only, and refuses a wrong lock or confirmation value at once."""

from __future__ import annotations

import asyncio
import inspect
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
from mongoshift.api.session import Background, Collections, Intents, Mongoshift
from mongoshift.errors import ChecksumMismatchError, ConfigInvalidError, LockHeldError
from mongoshift.project import session as project_session
from mongoshift.project.events import Event

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
        assert (await ms.baseline("0002_people.py", dry_run=True)).kept == ["0001_items.py", "0002_people.py"]
        assert (await ms.import_history("migrate-mongo", dry_run=True, force=True)).adopted == []
        claims = [api.Claim("up:0003_later.py", "task-1", ttl_seconds=60)]
        assert await ms.intents.claim(claims) == [True]
        assert await ms.intents.claim(claims) == [False]  # a duplicate while the first is live
        assert await ms.intents.settle("up:0003_later.py", "task-1", "failed", ttl_seconds=60)
        assert (await ms.intents.read(["up:0003_later.py"]))["up:0003_later.py"].state == "failed"
        runner = await ms.background.start_runner()
        assert runner.running
        await runner.stop()
        assert [r.name for r in (await ms.redo("0001_items.py")).results] == ["0001_items.py", "0001_items.py"]
        assert [r.name for r in (await ms.down("0001_items.py")).results] == ["0001_items.py"]
        assert [row.name for row in await ms.migrations("pending")] == ["0001_items.py"]
        assert await ms.unlock() is None

    # one scan of the folder, one URI fetch, one connection, one check of the own collections: for 21 calls
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
        (lambda ms: ms.down(lock=mongoshift.Lock(wait=-1)), "Lock.wait must be a finite number of seconds"),
        (lambda ms: ms.up(lock=mongoshift.Lock(wait=float("nan"))), "Lock.wait must be a finite number of seconds"),  # waited forever
        (lambda ms: ms.collections.converge(confirm="yes"), "confirm must be True, False or a function (async or plain)"),
        (lambda ms: ms.baseline("0001_items.py", lock=True), "lock must be a mongoshift Lock"),
        (lambda ms: ms.import_history("migrate-mongo", lock=mongoshift.Lock(wait=-1)), "Lock.wait must be a finite number of seconds"),
        (lambda ms: ms.intents.claim([api.Claim("up:0001_items.py", "task-1", ttl_seconds=0)]), "ttl_seconds must be above 0"),
        (lambda ms: ms.background.start_runner(concurrency=0), "concurrency must be an integer from 1 to 64"),
        (lambda ms: ms.up(target=5), "a migration name is text, not int"),
        (lambda ms: ms.down(steps="1"), "steps must be a whole number, not str"),
        (lambda ms: ms.audit(stale_after="x"), "must be a number of seconds"),
        (lambda ms: ms.audit(now="2020"), "now must be a datetime"),
        (lambda ms: ms.background.control("0001_items.py", "explode"), "action must be one of pause, resume"),
        (lambda ms: ms.migrations("bogus"), "only must be 'pending', 'applied' or None"),
        (lambda ms: ms.intents.settle("up:0001_items.py", "task-1", "dancing", ttl_seconds=60), "an intent's state is one of queued"),
        (lambda ms: ms.intents.claim([api.Claim("", "task-1", ttl_seconds=60)]), "an intent's key must not be empty"),
        (lambda ms: ms.intents.read("up:0001_items.py"), "keys is a list of keys, not one string"),
        (lambda ms: ms.background.failed_ids("0001_items.py", limit=-5), "limit must be a whole number, 0 or more"),
        (lambda ms: ms.up(step="no"), "step must be True or False, not str"),  # any text was True: one batch per file
        (lambda ms: ms.up(strict=1), "strict must be True or False, not int"),
        (lambda ms: ms.down(ordered="yes"), "ordered must be True or False, not str"),
        (lambda ms: ms.plan("up", force=1), "force must be True or False, not int"),
        # stop 56 (h5): each of these was an AttributeError / TypeError (after the lock was taken), or was read wrongly
        (lambda ms: ms.up(checksums=["0001_items.py"]), "checksums must be a mapping of migration name to checksum, not list"),
        (lambda ms: ms.up(checksums={"0001_items.py": 1}), "the checksum of '0001_items.py' must be non-empty text, not int"),
        (lambda ms: ms.down(checksums="abc"), "checksums must be a mapping"),
        (lambda ms: ms.down(batch=-1), "batch (--batch) must be a whole number of at least 1, not -1"),  # was exit 9: "no batch -1"
        (lambda ms: ms.down(steps=0), "steps (--steps) must be a whole number of at least 1, not 0"),
        (lambda ms: ms.lint("0001_items"), "files must be a list of migration names"),  # was read letter by letter: "not found: 0.py"
        (lambda ms: ms.lint(sizes="yes"), "sizes must be True or False, not str"),
        (lambda ms: ms.status(checksums="no"), "checksums must be True or False, not str"),
        (lambda ms: ms.squash("0001_items", dry_run="no"), "dry_run must be True or False, not str"),
        (lambda ms: ms.collections.plan(declarations="users"), "declarations must be a list of CollectionDeclaration, not str"),
        (lambda ms: ms.collections.plan(prune="yes"), "prune must be True or False, not str"),
        (lambda ms: asyncio.sleep(0, ms.collections.declaration(5)), "a collection name is text, not int"),
        # stop 57 (h5): a name as text was read letter by letter ("0.py is not a registered background migration"), and a
        # flag given as text was taken for True by its truth: reopen="no" reopened, clear="no" cleared the pace
        (lambda ms: ms.background.run("0001_items"), "names must be a list of migration names"),
        (lambda ms: ms.background.verify("0001_items"), "names must be a list of migration names"),
        (lambda ms: ms.background.run(once="no"), "once must be True or False, not str"),
        (lambda ms: ms.background.verify(reopen="no"), "reopen must be True or False, not str"),
        (lambda ms: ms.background.control("0001_items.py", "retry", from_start="no"), "from_start must be True or False, not str"),
        (lambda ms: ms.background.throttle("0001_items.py", clear="no"), "clear must be True or False, not str"),
        (lambda ms: ms.background.preview("0001_items.py", revert="no"), "revert must be True or False, not str"),
        (lambda ms: ms.background.preview("0001_items.py", validate=1), "validate must be True or False, not int"),
        (lambda ms: ms.background.watch("users"), "options must be a WatchOptions or None, not str"),  # was an AttributeError
        (lambda ms: ms.import_history("migrate-mongo", dry_run="no"), "dry_run must be True or False, not str"),
        (lambda ms: ms.import_history("migrate-mongo", force=1), "force must be True or False, not int"),
        (lambda ms: ms.baseline("0001_items", dry_run="no"), "dry_run must be True or False, not str"),
        (lambda ms: ms.collections.generate(check="no"), "check must be True or False, not str"),
        # stop 57 (h5): each of these was a bare TypeError or AttributeError
        (lambda ms: ms.intents.claim([api.Claim("up:0001_items.py", "task-1", ttl_seconds=60, data=["g1"])]), "an intent's data must be a mapping"),
        (lambda ms: ms.intents.settle("up:0001_items.py", "task-1", "running", ttl_seconds=60, data=["g1"]), "an intent's data must be a mapping"),
        (lambda ms: ms.import_history("migrate-mongo", map_file="no-such-map.toml"), "--map file not found: no-such-map.toml"),  # text is a path
        (lambda ms: ms.import_history("migrate-mongo", map_file=5), "map_file must be a path (text or a Path) or None, not int"),
        (lambda ms: ms.create_from_models(5), "name must be the migration's name as text, not int"),
        (lambda ms: ms.collections.generate(5), "models must be a package's name as text (such as 'myapp.models') or None, not int"),
        (lambda ms: ms.down(to=5), "a migration name is text, not int"),
    ],
    ids=[
        "lock-not-a-Lock", "negative-wait", "nan-wait", "confirm-not-bool-or-function", "baseline-lock", "import-wait", "intent-ttl", "runner-concurrency",
        "target-not-text", "steps-not-a-number", "stale-after-not-a-number", "now-not-a-datetime", "unknown-control", "unknown-only",
        "intent-state", "intent-empty-key", "intent-keys-as-one-string", "failed-ids-negative-limit",
        "step-not-a-bool", "strict-not-a-bool", "ordered-not-a-bool", "dry-run-force-not-a-bool",
        "checksums-a-list", "checksums-a-number", "down-checksums-text", "down-batch-negative", "down-steps-zero",
        "lint-one-name-as-text", "lint-sizes-not-a-bool",
        "status-checksums-not-a-bool", "squash-dry-run-not-a-bool", "plan-declarations-text", "plan-prune-not-a-bool", "declaration-not-text",
        "background-run-one-name-as-text", "verify-one-name-as-text", "run-once-not-a-bool", "verify-reopen-not-a-bool",
        "retry-from-start-not-a-bool", "throttle-clear-not-a-bool", "preview-revert-not-a-bool", "preview-validate-not-a-bool",
        "watch-options-text", "import-dry-run-not-a-bool", "import-force-not-a-bool", "baseline-dry-run-not-a-bool", "generate-check-not-a-bool",
        "claim-data-a-list", "settle-data-a-list", "import-map-file-as-text", "import-map-file-a-number", "from-models-name-a-number",
        "generate-models-a-number", "down-to-a-number",
    ],
)
async def test_a_wrong_argument_is_refused_before_anything_runs(project, db, call, message) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_items.py", LINE)
    async with mongoshift.connect(project.settings()) as ms:
        with pytest.raises(ConfigInvalidError) as refused:
            await call(ms)
        assert message in refused.value.message and refused.value.exit_code == 6
        assert [row.state for row in await ms.status()] == ["pending"]
    assert await db["_mongoshift_locks"].count_documents({}) == 0


async def test_a_queued_checksum_is_compared_whatever_way_its_name_is_spelled(project, db) -> None:  # type: ignore[no-untyped-def]
    """``checksums`` keys are migration names as every other argument takes them: ``0001_items`` (no ``.py``)
    was never compared, so a file changed since it was queued ran (stop 56, h5)."""
    project.add("0001_items.py", LINE)
    async with mongoshift.connect(project.settings()) as ms:
        with pytest.raises(ChecksumMismatchError) as refused:
            await ms.up(checksums={"0001_items": "0" * 64})
        assert refused.value.exit_code == 4 and "changed since it was queued" in refused.value.message
        assert [row.state for row in await ms.status()] == ["pending"]
        (row,) = (await ms.plan("up")).rows
        assert (await ms.up(checksums={str(project.root / "migrations" / "0001_items.py"): row.checksum})).results[0].status == "applied"


async def test_lint_on_a_closed_session_is_refused_as_every_call_is(project) -> None:  # type: ignore[no-untyped-def]
    """lint reads files only, but a call after the session was left is refused (docs/api.md), not served (stop 56, h5)."""
    project.add("0001_items.py", LINE)
    async with mongoshift.connect(project.settings()) as ms:
        assert (await ms.lint()).files == ["0001_items.py"]
    with pytest.raises(ConfigInvalidError, match="session is closed"):
        await ms.lint()


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


@pytest.fixture
def fast_project(project):  # type: ignore[no-untyped-def]
    """Short background timings: a stopped runner ends at its next poll."""
    project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.2)
    return project


#: A background migration whose lane waits a minute after each batch of 10: a runner is caught mid-migration.
SLOW = background_file(batch_size=10, extra="adaptive=False,").replace("pause_ms=0", "pause_ms=60_000")


async def _runner_after_one_batch(ms: Mongoshift, first_batch: asyncio.Event) -> api.BackgroundRunner:
    await ms.up()
    runner = await ms.background.start_runner()
    await asyncio.wait_for(first_batch.wait(), 60)  # a bound, not a measure
    return runner


def _on_batch(first_batch: asyncio.Event) -> Callable[[Event], None]:
    return lambda event: first_batch.set() if event.kind == "batch" else None


async def test_leaving_the_session_stops_its_runner_and_refuses_later_calls(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    """A session's runner runs on the session's connection: leaving the session stops it (batches
    finished, leases released) before that connection closes, and the session takes no call after."""
    await seed(db.people, 100)
    fast_project.add("0001_people.py", SLOW)
    first_batch = asyncio.Event()
    stop = mongoshift.CancelSignal()

    async with mongoshift.connect(fast_project.settings(), observers=[_on_batch(first_batch)], cancel=stop) as ms:
        runner = await _runner_after_one_batch(ms, first_batch)  # the session's observers hear the runner
        assert runner.running

    assert not runner.running
    assert not stop.is_set()  # the session's cancel is the caller's: leaving does not set it
    assert await db.people.count_documents({"__v": 2}) == 10  # its one batch; the minute's wait was cut short
    assert await db["_mongoshift_background_partitions"].count_documents({"lease": {"$exists": True}}) == 0
    with pytest.raises(ConfigInvalidError, match="session is closed"):
        await ms.status()
    with pytest.raises(ConfigInvalidError, match="session is closed"):
        await ms.background.start_runner()


async def test_the_sessions_cancel_stops_its_runner_and_stopping_the_runner_leaves_the_session(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 100)
    fast_project.add("0001_people.py", SLOW)
    first_batch = asyncio.Event()
    stop = mongoshift.CancelSignal()

    async with mongoshift.connect(fast_project.settings(), observers=[_on_batch(first_batch)], cancel=stop) as ms:
        runner = await _runner_after_one_batch(ms, first_batch)
        await runner.stop()
        assert not stop.is_set()  # the runner's stop is its own
        (status,) = await ms.background.status()
        assert status.status == "running"  # the session still serves calls

        again = await ms.background.start_runner()
        assert again.running
        stop.set("shutting down")

        for _ in range(1200):  # the runner has no event for its end: its state, looked at for at most a minute (a bound)
            if not again.running:
                break
            await asyncio.sleep(0.05)
        assert not again.running
    assert await db["_mongoshift_background_partitions"].count_documents({"lease": {"$exists": True}}) == 0


async def test_import_is_a_writing_run_that_the_sessions_observers_see(project, db) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_items.py", LINE)
    await db.changelog.insert_one({"fileName": "0001_items.py", "appliedAt": datetime.now(UTC)})  # migrate-mongo's record
    seen: list[Event] = []

    async with mongoshift.connect(project.settings(), observers=[seen.append]) as ms:
        dry = await ms.import_history("migrate-mongo", dry_run=True)
        assert [row.name for row in dry.adopted] == ["0001_items.py"] and seen == []  # a dry run writes nothing, says nothing
        report = await ms.import_history("migrate-mongo")
        assert [row.name for row in report.adopted] == ["0001_items.py"]
        assert [row.state for row in await ms.status()] == ["applied"]
        assert (await ms.baseline("0001_items.py")).kept == ["0001_items.py"]

    runs = [(e.kind, e.data["command"]) for e in seen if e.kind in ("run_start", "run_end")]
    assert runs == [("run_start", "import"), ("run_end", "import"), ("run_start", "baseline"), ("run_end", "baseline")]


#: Each flat function of ``mongoshift.api`` and the session call it is the one-shot of.
ONE_SHOTS = {
    "up": Mongoshift.up, "down": Mongoshift.down, "redo": Mongoshift.redo, "dry_run": Mongoshift.plan,
    "status": Mongoshift.status, "list_migrations": Mongoshift.migrations, "audit": Mongoshift.audit,
    "lock_status": Mongoshift.lock_status, "unlock": Mongoshift.unlock, "run_log": Mongoshift.run_log,
    "import_history": Mongoshift.import_history, "baseline": Mongoshift.baseline,
    "squash": Mongoshift.squash, "lint": Mongoshift.lint, "create_from_models": Mongoshift.create_from_models,
    "generate_collections": Collections.generate,
    "converge": Collections.converge, "plan_converge": Collections.plan, "declaration_for": Collections.declaration,
    "run_background": Background.run, "background_status": Background.status, "background_partitions": Background.partitions,
    "control_background": Background.control, "repin_background": Background.repin, "verify_background": Background.verify,
    "throttle_background": Background.throttle, "background_samples": Background.samples, "background_failed_ids": Background.failed_ids,
    "watch_background": Background.watch, "background_watch_status": Background.watch_status,
    "preview_background": Background.preview, "coordinate_background": Background.coordinate,
    "run_background_slice": Background.run_slice, "start_background_runner": Background.start_runner,
    "claim_intents": Intents.claim, "read_intents": Intents.read, "settle_intent": Intents.settle,
}


def test_every_session_call_has_its_one_shot_function() -> None:
    calls = {f"{cls.__name__}.{name}" for cls in (Mongoshift, Collections, Background, Intents) for name in vars(cls) if not name.startswith("_")}
    calls -= {"Mongoshift.settings", "Mongoshift.rescan"}  # a property; a one-shot session reads the folder afresh anyway
    assert calls == {method.__qualname__ for method in ONE_SHOTS.values()}


@pytest.mark.parametrize("flat", sorted(ONE_SHOTS))
def test_a_flat_function_takes_exactly_its_session_calls_options(flat: str) -> None:
    """Plus what a session takes when it opens (``settings``, ``client``, ``observers``, ``cancel``); nothing else."""
    opening = {"settings", "client", "observers", "cancel"}
    function = inspect.signature(getattr(api, flat)).parameters
    method = inspect.signature(ONE_SHOTS[flat]).parameters
    assert next(iter(function)) == "settings"
    assert set(function) - set(method) <= opening
    options = [(name, p.kind, p.default) for name, p in function.items() if name not in opening]
    assert options == [(name, p.kind, p.default) for name, p in method.items() if name != "self"]


@pytest.mark.parametrize(
    ("call", "keyword"),
    [
        (lambda s, **old: api.up(s, **old), {"no_lock": True}),
        (lambda s, **old: api.up(s, **old), {"wait": 5}),
        (lambda s, **old: api.up(s, **old), {"yes": True}),
        (lambda s, **old: api.down(s, **old), {"no_lock": True}),
        (lambda s, **old: api.down(s, **old), {"wait": 5}),
        (lambda s, **old: api.redo(s, **old), {"no_lock": True}),
        (lambda s, **old: api.redo(s, **old), {"wait": 5}),
        (lambda s, **old: api.converge(s, **old), {"yes": True}),
        (lambda s, **old: api.converge(s, **old), {"no_lock": True}),
        (lambda s, **old: api.converge(s, **old), {"wait": 5}),
        (lambda s, **old: api.import_history(s, "migrate-mongo", **old), {"no_lock": True}),
        (lambda s, **old: api.import_history(s, "migrate-mongo", **old), {"wait": 5}),
        (lambda s, **old: api.baseline(s, "0001_items.py", **old), {"no_lock": True}),
        (lambda s, **old: api.baseline(s, "0001_items.py", **old), {"wait": 5}),
        (lambda s, **old: api.baseline(s, "0001_items.py", **old), {"yes": True}),
    ],
    ids=lambda value: "-".join(value) if isinstance(value, dict) else None,
)
async def test_the_flat_functions_refuse_the_old_lock_and_confirmation_keywords(project, db, call, keyword: dict[str, Any]) -> None:  # type: ignore[no-untyped-def]
    """``no_lock``/``wait`` are ``lock=Lock(take, wait)`` and ``yes`` is ``confirm=True``: the old spellings do not exist."""
    project.add("0001_items.py", LINE)
    with pytest.raises(TypeError, match=next(iter(keyword))):
        await call(project.settings(), **keyword)
    assert await db["_mongoshift_migrations"].count_documents({}) == 0


async def test_settings_paths_may_be_text_and_wrong_arguments_are_config_errors(project) -> None:  # type: ignore[no-untyped-def]
    """``load_settings(config_path="mongoshift.toml")`` is what a user writes; ``connect("mongodb://...")`` and
    ``cancel=True`` are refused as configuration errors (6), not AttributeErrors."""
    config = str(project.root / "mongoshift.toml")
    project.write_config()
    settings = mongoshift.load_settings({"uri": project.uri, "db": project.db}, config_path=config, cwd=str(project.root), env_file=False)
    assert settings.db == project.db
    for wrong in (lambda: mongoshift.load_settings(config_path=3), lambda: mongoshift.load_settings("uri")):
        with pytest.raises(ConfigInvalidError):
            wrong()
    with pytest.raises(ConfigInvalidError, match="settings must be a mongoshift Settings"):
        async with mongoshift.connect(project.uri):  # type: ignore[arg-type]
            pass
    with pytest.raises(ConfigInvalidError, match="cancel must be a mongoshift CancelSignal"):
        await api.up(settings, cancel=True)  # type: ignore[arg-type]
    # stop 57 (h5): these took the mapping for settings and failed with an AttributeError
    tenants = api.Tenants(names=[project.db])
    for call in (
        lambda: api.open_client({"uri": project.uri}),
        lambda: api.select_tenants({"db": project.db}, tenants),
        lambda: api.up_across({"db": project.db}, tenants),
        lambda: api.down_across({"db": project.db}, tenants, target="0001_items"),
        lambda: api.status_across({"db": project.db}, tenants),
        lambda: api.across_tenants({"db": project.db}, lambda ms: ms.status(), tenants),
        lambda: api.squash_across({"db": project.db}, tenants, "0001_items"),
    ):
        with pytest.raises(ConfigInvalidError, match="settings must be a mongoshift Settings"):
            await call()


HANGS = """
import asyncio

async def up(ctx):
    await ctx.db.marks.insert_one({"started": True})
    ctx.log.info("started")
    await asyncio.Event().wait()  # until the task awaiting the call is cancelled

async def down(ctx):
    pass
"""


async def test_a_cancelled_task_records_its_running_migration_failed_and_releases_the_lock(project, db) -> None:  # type: ignore[no-untyped-def]
    """``asyncio.wait_for(ms.up(), ...)`` or a TaskGroup cancels the task awaiting the call: the body is cut off
    where it stood. It read ``pending`` (no record) and, the lock being released, the next run said nothing of the
    half-done work; it is now recorded failed, its events say ``aborted``, and the cancellation goes on (stop 56, h5)."""
    project.add("0001_items.py", LINE)
    project.add("0002_hangs.py", HANGS)
    started = asyncio.Event()
    seen: list[Event] = []

    def observe(event: Event) -> None:
        seen.append(event)
        if event.kind == "log":
            started.set()

    async with mongoshift.connect(project.settings(), observers=[observe]) as ms:
        task = asyncio.create_task(ms.up())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        rows = {row.name: row for row in await ms.status()}
        assert rows["0001_items.py"].state == "applied"
        assert rows["0002_hangs.py"].state == "failed"
        assert "the task running it was cancelled" in (rows["0002_hangs.py"].error or "")
        assert await ms.lock_status() is None
        ends = [e for e in seen if e.kind in ("migration_end", "run_end") and e.data["outcome"] == "failed"]
        assert [(e.kind, e.data["error_kind"]) for e in ends] == [("migration_end", "aborted"), ("run_end", "aborted")]
        project.add("0002_hangs.py", LINE.replace("items", "marks"))  # fixed and deployed: the next up runs it again
        ms.rescan()
        assert [r.name for r in (await ms.up()).results] == ["0002_hangs.py"]
