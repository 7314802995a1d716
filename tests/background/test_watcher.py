"""The live watcher: old shapes written after completion are upgraded as they land.

One leader per collection (a lease lock), a resume token saved fenced by that lease, a
restart plus a verify when the history is lost, polling without the privilege to watch,
a reopen when it lags, and a long run beside an application writing at full speed.
Waits poll the database with a generous bound: nothing here asserts a duration.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.errors import OperationFailure

from mongoshift.api import background as bg, migrations as command
from mongoshift.background.lanes.engine import open_engine
from mongoshift.background.state.events import Event
from mongoshift.background.watch.watcher import Watcher, WatchOptions
from mongoshift.project.run import CancelSignal

from ..conftest import REAL_URI, TEST_CLIENT_OPTIONS, Project, cli_env, start_cli
from .conftest import background_file, seed

NAME = "0001_names.py"
FAST = WatchOptions(save_seconds=0.2, refresh_seconds=0.5, max_await_ms=100)
#: An id no output may show.
SECRET_ID = "watch-id-5521"


@pytest.fixture
def cli_logging() -> Any:
    """``main()`` in this process points the mongoshift logger at the test's captured stderr: put it back after."""
    logger = logging.getLogger("mongoshift")
    saved = (list(logger.handlers), logger.propagate, logger.level)
    yield
    logger.handlers[:] = saved[0]
    logger.propagate, logger.level = saved[1], saved[2]


def old_doc(_id: Any, **extra: Any) -> dict[str, Any]:
    return {"_id": _id, "first": "old", "last": "app", "__v": 1, "__rev": 1, **extra}


async def until(what: str, check: Callable[[], Awaitable[Any]], bound: float = 120.0) -> Any:
    """Poll ``check`` until it gives something true; fail after ``bound`` seconds (a bound, not a measure)."""
    deadline = time.monotonic() + bound
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def completed(project: Project, db: Any, n: int = 5, source: str | None = None) -> Any:
    await seed(db.people, n)
    project.add(NAME, source or background_file())
    s = project.settings()
    await command.up(s)
    (done,) = await bg.run(s, [NAME])
    assert done.status == "completed"
    return s


class Running:
    """A watcher in this process, as a task, with the events it emitted."""

    def __init__(self, settings: Any, options: WatchOptions = FAST, **watcher: Any) -> None:
        self.events: list[Event] = []
        self.cancel = CancelSignal()
        self.task = asyncio.create_task(self._run(settings, options, watcher))

    async def _run(self, settings: Any, options: WatchOptions, watcher: dict[str, Any]) -> Any:
        async with open_engine(settings, cancel=self.cancel, observers=[self.events.append]) as engine:
            return await Watcher(engine, options, **watcher).run()

    def states(self) -> list[str]:
        return [e.data["state"] for e in self.events if e.kind == "watch"]

    async def reached(self, state: str, after: int = 0) -> None:
        async def check() -> bool:
            if self.task.done():
                self.task.result()  # its error, if it failed
            return state in self.states()[after:]

        await until(f"state {state} (seen: {self.states()})", check)

    async def stop(self) -> Any:
        self.cancel.set("test over")
        return await self.task


async def watch_doc(db: Any) -> dict[str, Any] | None:
    return await db["_mongoshift_background_watch"].find_one({"_id": "people"})


async def upgraded(db: Any, *ids: Any) -> bool:
    return await db.people.count_documents({"_id": {"$in": list(ids)}, "__v": 2}) == len(ids)


async def test_an_old_shape_insert_is_upgraded_a_downgrade_undone_and_other_updates_ignored(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    s = await completed(fast_project, db)
    watcher = Running(s)
    try:
        await watcher.reached("streaming")
        await db.people.insert_one(old_doc(SECRET_ID))
        await until("the upgrade", lambda: upgraded(db, SECRET_ID))
        doc = await db.people.find_one({"_id": SECRET_ID})
        assert doc["full_name"] == "old app" and doc["__rev"] == 2  # the migration's own write: one revision more
        await db.people.update_one({"_id": 0}, {"$set": {"other": 1}})  # leaves the version alone: no event
        await db.people.update_one({"_id": 1}, {"$set": {"__v": 1, "first": "a", "last": "b"}, "$inc": {"__rev": 1}})
        await until("the downgrade undone", lambda: upgraded(db, 1))
        record = await until("the counters saved", lambda: _saved_with(db, upgraded=2))
    finally:
        records = await watcher.stop()
    assert record["counters"]["events"] == 2 and "skipped" not in record["counters"]
    assert record["guards"] == [NAME] and record["leader"]["pid"] == os.getpid()
    drift = [e for e in watcher.events if e.kind == "drift" and e.data.get("source") == "stream"]
    assert [(e.migration, e.data["action"]) for e in drift] == [(NAME, "upgraded"), (NAME, "upgraded")]
    assert SECRET_ID not in repr(watcher.events)
    assert [r.state for r in records] == ["stopped"]
    assert (await db["_mongoshift_background"].find_one({"_id": NAME}))["status"] == "completed"  # no reopen needed


async def _saved_with(db: Any, **counters: int) -> dict[str, Any] | None:
    record = await watch_doc(db)
    if record and all(record.get("counters", {}).get(k) == v for k, v in counters.items()):
        return record
    return None


def start_cli_watcher(project: Project, log: Any) -> subprocess.Popen[str]:
    """``mongoshift background watch`` in a process of its own (it is killed with SIGKILL)."""
    return subprocess.Popen(
        [sys.executable, "-m", "mongoshift", "background", "watch", "--save-interval", "0.2", "--json"],
        cwd=project.root, env=cli_env(), stdout=subprocess.DEVNULL, stderr=log, text=True,
    )


async def test_kill_9_of_the_leader_hands_over_to_the_follower_which_resumes_from_the_token_with_no_event_missed(fast_project, db, tmp_path) -> None:  # type: ignore[no-untyped-def]
    s = await completed(fast_project, db)
    with open(tmp_path / "leader.log", "w") as log:  # noqa: ASYNC230 - a local file for the child process, opened once
        leader = start_cli_watcher(fast_project, log)
        try:
            await until("the process leading", lambda: _leading(db, leader.pid))
            follower = Running(s)
            await follower.reached("following")
            await db.people.insert_many([old_doc(f"a{i}") for i in range(5)])
            # Saved with its position: the upgrades and the token after their events, in one fenced write.
            await until("the leader's save", lambda: _saved_with(db, upgraded=5))
        finally:
            leader.send_signal(signal.SIGKILL)
            leader.wait()
    try:
        # Written while nobody leads (the dead leader's lease has not expired yet).
        await db.people.insert_many([old_doc(f"b{i}") for i in range(5)])
        await db.people.update_one({"_id": "a0"}, {"$set": {"__v": 1}, "$inc": {"__rev": 1}})
        await until("the handover", lambda: _leading(db, os.getpid()))
        await until("the writes of the gap upgraded", lambda: upgraded(db, "a0", *[f"b{i}" for i in range(5)]))
        await until("the follower's save", lambda: _saved_with(db, upgraded=11))
    finally:
        await follower.stop()
    states = follower.states()
    assert states[0] == "following" and "streaming" in states
    assert "catching_up" not in states  # resumed from the saved token, not started over from now
    assert (await db["_mongoshift_background"].find_one({"_id": NAME}))["status"] == "completed"  # nothing reopened


async def _leading(db: Any, pid: int) -> bool:
    record = await watch_doc(db)
    return bool(record and record.get("state") == "streaming" and (record.get("leader") or {}).get("pid") == pid)


async def test_a_leader_whose_lease_renewal_came_late_still_saves_stopped_as_it_leaves(fast_project, db, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    """Found flaky under load (``background watch`` stopped by SIGTERM reported its collection ``streaming``): a lease
    renewal late past its 2 s TTL marked the lease lost, and the leader then skipped its last save, though nobody had
    taken over. The save is fenced anyway (another leader's fence refuses it), so it is always tried."""
    from mongoshift.project.lock import LeaseLock

    leases: list[LeaseLock] = []
    start_heartbeat = LeaseLock.start_heartbeat

    def kept(self: LeaseLock) -> None:
        leases.append(self)
        start_heartbeat(self)

    monkeypatch.setattr(LeaseLock, "start_heartbeat", kept)
    s = await completed(fast_project, db)
    watcher = Running(s)
    await watcher.reached("streaming")
    (lease,) = [lease for lease in leases if lease.lock_id == "watch:people"]
    lease._mark_lost("the lock could not be renewed before its TTL ran out")  # a heartbeat starved past the TTL
    records = await watcher.stop()
    assert [r.state for r in records] == ["stopped"]
    assert (await watch_doc(db))["state"] == "stopped"
    # said as what it is: not the migration lock, which no watcher takes
    assert "the live watcher's lease of people lost: the lock could not be renewed before its TTL ran out" in caplog.messages


async def test_a_stopped_leader_lets_go_at_once_and_a_fenced_off_one_cannot_save(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    s = await completed(fast_project, db)
    first = Running(s)
    await first.reached("streaming")
    second = Running(s)
    await second.reached("following")
    await first.stop()  # a clean stop releases the lease: no TTL to wait for
    await second.reached("streaming")
    await db.people.insert_one(old_doc("late"))
    await until("the upgrade", lambda: upgraded(db, "late"))
    await second.stop()
    async with open_engine(s) as engine:
        store = engine.store
        await store.watch_lead("people", "fence-a", {"pid": 1})
        await store.watch_lead("people", "fence-b", {"pid": 2})
        assert not await store.watch_save("people", "fence-a", state="streaming", guards=[], token={"_data": "x"})
        assert await store.watch_save("people", "fence-b", state="streaming", guards=[], token={"_data": "y"})
        (record,) = await store.watch_records()
    assert record.has_position and record.leader and record.leader["pid"] == 2
    assert "_data" not in json.dumps(record.to_json())  # the position is never shown


@pytest.fixture(scope="module")
def small_history_uri() -> Any:
    """An embedded server that keeps only its last 200 writes (a real oplog cannot be shrunk that far)."""
    from mongoshift.embedded.process import embedded_server

    with embedded_server(change_history=200) as uri:
        yield uri


@pytest.mark.skipif(bool(REAL_URI), reason="needs a 200-event change history: the embedded server's --change-history")
async def test_a_lost_history_restarts_from_now_after_a_verify_that_reopens_what_was_missed(small_history_uri, tmp_path, db_name) -> None:  # type: ignore[no-untyped-def]
    project = Project(tmp_path, small_history_uri, db_name)
    project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.2)
    client: AsyncMongoClient[Any] = AsyncMongoClient(small_history_uri, **TEST_CLIENT_OPTIONS)
    db = client[db_name]
    try:
        s = await completed(project, db)
        first = Running(s)
        await first.reached("streaming")
        await until("a saved position", lambda: db["_mongoshift_background_watch"].find_one({"resume_token": {"$exists": True}}))
        await first.stop()
        # While nobody watches, more writes than the history keeps: the saved position falls off it.
        await db.people.insert_many([old_doc(f"m{i}") for i in range(300)])
        second = Running(s)
        await second.reached("idle")  # history lost, probed, reopened: nothing completed is left to guard
        states = second.states()
        assert states.index("history_lost") < states.index("catching_up")
        drift = [e for e in second.events if e.kind == "drift"]
        assert [(e.migration, e.data["action"]) for e in drift] == [(NAME, "reopened")]
        seen = len(second.states())  # before the pass: the watcher may stream again before run() returns
        (done,) = await bg.run(s, [NAME])  # a runner does the reopened pass
        assert done.status == "completed" and done.totals["migrated"] == 305
        await second.reached("streaming", after=seen)  # guarding again, from now
        await db.people.insert_one(old_doc("after"))
        await until("the upgrade", lambda: upgraded(db, "after"))
        record = await until("the restart counted", lambda: _saved_with(db, restarts=1))
        await second.stop()
        assert record["counters"]["restarts"] == 1
        assert await db.people.count_documents({"__v": 1}) == 0
    finally:
        await client.drop_database(db_name)
        await client.close()


async def test_without_the_privilege_to_watch_it_polls_the_old_shape_query(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    s = await completed(fast_project, db)

    async def refused(collection: Any, **options: Any) -> Any:
        raise OperationFailure("not authorized to execute command aggregate with $changeStream", code=13)

    watcher = Running(s, watch=refused)
    try:
        await watcher.reached("fallback")
        await db.people.insert_one(old_doc("polled"))
        await until("the polled upgrade", lambda: upgraded(db, "polled"))
    finally:
        await watcher.stop()


async def test_a_leader_lagging_past_the_bound_reopens_its_migrations(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    s = await completed(fast_project, db)
    # Its clock an hour ahead of the server's: every event looks an hour old.
    watcher = Running(s, WatchOptions(save_seconds=0.2, refresh_seconds=0.5, max_await_ms=100, max_lag_seconds=60), clock=lambda: time.time() + 3600)
    try:
        await watcher.reached("streaming")
        await db.people.insert_one(old_doc("late"))
        await watcher.reached("overloaded")
        await watcher.reached("idle")
        record = await until("the reopen counted", lambda: _saved_with(db, reopened=1))
    finally:
        await watcher.stop()
    assert record.get("resume_token") is None  # it starts over from now once the pass is done
    state = await db["_mongoshift_background"].find_one({"_id": NAME})
    assert state["status"] == "pending" and state["history"][-1]["action"] == "reopen"


async def test_it_stands_aside_while_a_revert_of_the_collection_runs(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    source = background_file(extra="revert=revert,").replace(
        "background = Background(",
        "def revert(doc, ctx):\n    doc['first'], doc['last'] = doc.pop('full_name').split(' ')\n    return doc\n\nbackground = Background(",
    )
    s = await completed(fast_project, db, n=20, source=source)
    watcher = Running(s)
    try:
        await watcher.reached("streaming")
        assert (await command.down(s)).results[0].reason == "revert registered"
        await watcher.reached("suspended")
        (reverted,) = await bg.run(s, [NAME])
        assert reverted.status == "completed" and reverted.direction == "revert"
        await watcher.reached("idle")  # nothing completed forward is left to guard
    finally:
        await watcher.stop()
    assert await db.people.count_documents({"__v": 1}) == 20  # the revert's work untouched


SOAK_SECONDS = 60


@pytest.mark.slow
async def test_soak_beside_an_application_writing_at_full_speed_every_old_shape_ends_new_and_no_write_is_lost(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    """60 s of an old and a new application version writing at once, the watcher hosted by the in-app runner.

    Every write bumps the revision (the versioning contract), so a guarded upgrade never overwrites one."""
    import random

    s = await completed(fast_project, db, n=50)
    names = {i: f"F{i} L{i}" for i in range(50)}  # the expected full_name of every document
    hits: dict[Any, int] = dict.fromkeys(range(50), 0)  # the expected count of the new version's increments
    events: list[Event] = []
    runner = await bg.start_background_runner(s, watch=FAST, observers=[events.append])
    try:
        await until("the stream", lambda: _streaming(events))
        stop_at = time.monotonic() + SOAK_SECONDS

        async def application(seed_: int) -> int:
            rng = random.Random(seed_)
            writes = 0
            while time.monotonic() < stop_at:
                roll = rng.random()
                key = f"w{seed_}-{writes}"
                if roll < 0.4:  # the old version inserts the old shape
                    await db.people.insert_one({"_id": key, "first": "O", "last": key, "__v": 1, "__rev": 1})
                    names[key], hits[key] = f"O {key}", 0
                elif roll < 0.6:  # the new version inserts the new shape
                    await db.people.insert_one({"_id": key, "full_name": f"N {key}", "__v": 2, "__rev": 1})
                    names[key], hits[key] = f"N {key}", 0
                else:
                    target = rng.choice(list(hits))
                    if roll < 0.9:  # the new version counts
                        await db.people.update_one({"_id": target}, {"$inc": {"hits": 1, "__rev": 1}})
                    else:  # the old version writes its shape back over a document
                        await db.people.update_one(
                            {"_id": target},
                            {"$set": {"__v": 1, "first": "D", "last": key}, "$unset": {"full_name": ""}, "$inc": {"hits": 1, "__rev": 1}},
                        )
                        names[target] = f"D {key}"
                    hits[target] += 1
                writes += 1
            return writes

        writes = sum(await asyncio.gather(application(1), application(2)))
        await until("no old shape left", lambda: _none_old(db), bound=180)
    finally:
        await runner.stop()
    assert writes > 100  # it did write at speed for the whole time
    upgrades = sum(e.data["documents"] for e in events if e.kind == "drift" and e.data.get("action") == "upgraded")
    print(f"soak: {writes} application writes, {upgrades} upgrades by the watcher, states {[e.data['state'] for e in events if e.kind == 'watch']}")
    assert upgrades  # the watcher did them, not only a reopened pass
    stored = {d["_id"]: d async for d in db.people.find({})}
    assert set(stored) == set(names)  # no document lost
    wrong = [k for k, d in stored.items() if (d.get("__v"), d.get("full_name"), d.get("hits", 0)) != (2, names[k], hits[k]) or "first" in d]
    assert not wrong, f"{len(wrong)} document(s) not in the new shape with every application write: {wrong[:5]}"


async def _streaming(events: list[Event]) -> bool:
    return any(e.kind == "watch" and e.data["state"] == "streaming" for e in events)


async def _none_old(db: Any) -> bool:
    return await db.people.count_documents({"__v": {"$ne": 2}}) == 0


async def test_audit_warns_of_a_watcher_without_a_live_leader_for_long(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    from datetime import UTC, datetime, timedelta

    from mongoshift import api

    now = datetime.now(UTC).replace(microsecond=0)
    long_ago, lately = now - timedelta(minutes=20), now - timedelta(minutes=1)
    await db["_mongoshift_background_watch"].insert_many([
        {"_id": "orphan", "fence": "f", "state": "streaming", "updated_at": long_ago},  # its process died
        {"_id": "led", "fence": "f", "state": "streaming", "updated_at": long_ago},  # a live lease
        {"_id": "stopped", "fence": "f", "state": "stopped", "updated_at": long_ago},  # stopped on purpose
        {"_id": "recent", "fence": "f", "state": "streaming", "updated_at": lately},  # within 15 min
    ])
    await db["_mongoshift_locks"].insert_one({"_id": "watch:led", "owner": "o", "expires_at": now + timedelta(seconds=30)})
    report = await api.audit(fast_project.settings(), now=now)
    found = [(f.check, f.severity, f.subject) for f in report.findings]
    assert found == [("background.watcher_leaderless", "warn", "orphan")]
    assert "no live leader for 20 min" in report.findings[0].message
    assert report.exit_code == 40


def test_background_status_shows_each_watcher_with_its_counters_never_its_position(fast_project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    sync_client[fast_project.db]["_mongoshift_background_watch"].insert_one(
        {"_id": "people", "fence": "f", "state": "streaming", "guards": [NAME], "resume_token": {"_data": "SECRET-TOKEN"},
         "counters": {"events": 7, "upgraded": 5, "skipped": 2}, "leader": {"host": "h1", "pid": 42}}
    )
    for args, parse in ((["--json"], json.loads), ([], str)):
        code, out, _ = cli(fast_project, "background", "status", *args)
        assert code == 0 and "SECRET-TOKEN" not in out
        shown = parse(out)
        if isinstance(shown, dict):
            (row,) = shown["watchers"]
            assert (row["collection"], row["state"], row["has_position"]) == ("people", "streaming", True)
            assert row["counters"] == {"events": 7, "upgraded": 5, "skipped": 2, "stranded": 0, "failed": 0, "restarts": 0, "reopened": 0}
        else:
            assert "people\tstreaming\th1:42" in shown


async def test_the_command_stops_on_sigterm_with_exit_0_and_refuses_a_bad_collection_list(fast_project, db, cli) -> None:  # type: ignore[no-untyped-def]
    await completed(fast_project, db)
    proc = start_cli(fast_project, "background", "watch", "--collections", "people", "--json")
    try:
        await until("the process leading", lambda: _leading(db, proc.pid))
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "mongoshift: stopping: finishing the events at hand, saving the position and releasing the watch leases" in err
    assert "(SIGTERM received: a second SIGTERM or Ctrl-C stops now)" in err and "press Ctrl-C again" not in err, err
    assert "after the current migration" not in err
    (record,) = json.loads(out)["watch"]
    assert (record["collection"], record["state"], record["guards"]) == ("people", "stopped", [NAME])
    assert (await db["_mongoshift_locks"].find_one({"_id": "watch:people"})) is None  # its lease let go
    refused = cli(fast_project, "background", "watch", "--collections", "people,", "--json")  # refused before it connects
    assert refused.returncode == 6 and json.loads(refused.stdout)["error"]["kind"] == "config_invalid"



async def test_a_collection_no_registered_migration_rewrites_is_refused_with_the_known_ones(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    """``--collections typo`` sat idle forever (INFO "idle", exit 0 on Ctrl-C), though the docs say a bad
    ``--collections`` is exit 6: a name no registered background migration rewrites is refused, naming it and
    the collections that have one. A process, so that a watcher that does not refuse cannot hang the suite."""
    from ..conftest import reaped

    await completed(fast_project, db)
    with reaped(start_cli(fast_project, "background", "watch", "--collections", "people,typo", "--json")) as proc:
        out, err = proc.communicate(timeout=120)  # a hang guard: the refusal comes before any stream
    assert proc.returncode == 6, err[-2000:]
    error = json.loads(out)["error"]
    assert error["kind"] == "config_invalid" and error["details"]["unknown"] == ["typo"], error
    assert "typo" in error["message"] and "(the collections that have one: people)" in error["message"], error


CHAIN_STEP = '''
from mongoshift import Background

def migrate(doc, ctx):
    doc["v3"] = True
    return doc

background = Background(collection="people", from_version=2, to_version=3, migrate=migrate, pause_ms=0)
'''


async def test_a_transactional_step_commits_its_side_write_once_and_a_chain_is_taken_step_by_step(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    from .test_transaction import txn_file

    await seed(db.people, 5)
    fast_project.add("0001_txn.py", txn_file(bad="assert ctx.session is not None and ctx.session.in_transaction"))
    fast_project.add("0002_v3.py", CHAIN_STEP)
    s = fast_project.settings()
    await command.up(s)
    assert [r.status for r in await bg.run(s, ["0001_txn.py", "0002_v3.py"])] == ["completed", "completed"]
    await db.audit.delete_many({})
    watcher = Running(s)
    try:
        await watcher.reached("streaming")
        await db.people.insert_one(old_doc("chained"))
        await until("both steps", lambda: db.people.find_one({"_id": "chained", "__v": 3}))
    finally:
        await watcher.stop()
    doc = await db.people.find_one({"_id": "chained"})
    assert doc["full_name"] == "old app" and doc["v3"] is True and doc["__rev"] == 3  # one guarded write per step
    assert await db.audit.count_documents({"order": "chained"}) == 1  # committed with its step, once


def test_watch_options_are_refused_when_the_runner_is_built(fast_project) -> None:  # type: ignore[no-untyped-def]
    from mongoshift.errors import ConfigInvalidError

    s = fast_project.settings()
    for bad in ("yes", 1, WatchOptions(save_seconds=0), WatchOptions(collections=("",)), WatchOptions(max_await_ms=0)):
        with pytest.raises(ConfigInvalidError):
            bg.BackgroundRunner(s, watch=bad)


MOVING_FILE = background_file().replace(
    '    doc["full_name"] = doc.pop("first", "") + " " + doc.pop("last", "")\n',
    '    doc["full_name"] = doc.pop("first", "") + " " + doc.pop("last", "")\n    if doc.get("n") == 99:\n        doc["n"] = 100\n',
)


async def test_on_a_sharded_collection_the_watcher_refuses_a_transform_that_moves_a_document(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    with fast_project.config.open("a", encoding="utf-8") as out:
        out.write("[mongoshift.shard_keys]\npeople = { n = 1 }\n")
    assert "doc[\"n\"] = 100" in MOVING_FILE
    s = await completed(fast_project, db, source=MOVING_FILE)
    watcher = Running(s)
    try:
        await watcher.reached("streaming")
        await db.people.insert_many([old_doc("moving", n=99), old_doc("staying", n=5)])
        await until("the upgrade", lambda: upgraded(db, "staying"))
        await until("the refusal counted", lambda: _saved_with(db, failed=1))
    finally:
        await watcher.stop()
    moving = await db.people.find_one({"_id": "moving"})
    assert moving["n"] == 99 and moving["__v"] == 1  # left as it was, for the reopened pass to record


async def test_a_server_without_change_streams_is_refused_at_once_not_after_a_refresh(standalone_project, standalone_db) -> None:  # type: ignore[no-untyped-def]
    from mongoshift.errors import ConfigInvalidError

    standalone_project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.2)
    s = await completed(standalone_project, standalone_db)
    # A standalone server refuses $changeStream (40573). A refresh an hour away: the refusal
    # must not wait for it (the bound below is a bound, not a measure).
    with pytest.raises(ConfigInvalidError, match="needs change streams"):
        await _watched_until_it_ends(s)
    assert (await standalone_db["_mongoshift_locks"].find_one({"_id": "watch:people"})) is None  # its lease let go


async def test_a_standalone_is_refused_at_once_with_nothing_to_guard_yet(standalone_project, standalone_db) -> None:  # type: ignore[no-untyped-def]
    """No migration completed yet: no collection to stream, and still the refusal comes first, not silence."""
    from mongoshift.errors import ConfigInvalidError

    standalone_project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.2)
    with pytest.raises(ConfigInvalidError, match="needs change streams"):
        await _watched_until_it_ends(standalone_project.settings())


async def _watched_until_it_ends(settings: Any) -> Any:
    """A watcher with a refresh an hour away, until it ends by itself: its result (or its error, raised)."""
    watcher = Running(settings, WatchOptions(save_seconds=0.2, refresh_seconds=3600, max_await_ms=100))
    try:
        await until("the watcher ending", lambda: _done(watcher.task), bound=120)
    finally:
        watcher.cancel.set("test over")
    return watcher.task.result()


async def _done(task: asyncio.Task[Any]) -> bool:
    return task.done()


async def test_a_document_no_migration_can_upgrade_is_reported_as_stranded_not_skipped(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    s = await completed(fast_project, db)
    watcher = Running(s)
    try:
        await watcher.reached("streaming")
        await db.people.insert_many([{"_id": SECRET_ID, "first": "x", "__v": 0}, {"_id": "unversioned", "first": "y"}, old_doc("old")])
        await until("the upgrade", lambda: upgraded(db, "old"))
        record = await until("the stranded counted", lambda: _saved_with(db, stranded=2, upgraded=1))
    finally:
        await watcher.stop()
    assert record["counters"].get("skipped", 0) == 0
    reported = [e for e in watcher.events if e.kind == "drift" and e.data.get("stranded")]
    assert [(e.migration, e.data["action"], e.data["source"]) for e in reported] in (
        [(NAME, "reported", "stream")] * 1, [(NAME, "reported", "stream")] * 2,  # one group of events, or two
    )
    assert sum(e.data["documents"] for e in reported) == 2 and SECRET_ID not in repr(watcher.events)
    assert await db.people.count_documents({"_id": {"$in": [SECRET_ID, "unversioned"]}, "full_name": {"$exists": True}}) == 0
    assert (await db["_mongoshift_background"].find_one({"_id": NAME}))["status"] == "completed"  # a reopen would not help


async def test_the_watch_command_hosted_in_process_inside_a_running_event_loop_runs_and_stops_on_sigterm(  # type: ignore[no-untyped-def]
    fast_project, db, monkeypatch, capsys, cli_logging
) -> None:
    """``main(["background", "watch"])`` from async code: it was "asyncio.run() cannot be called from a running event loop"."""
    import threading

    from pymongo import MongoClient

    from mongoshift.cli.main import main

    await completed(fast_project, db)
    for key in [k for k in os.environ if k.startswith("MONGOSHIFT_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(fast_project.root)
    finished, stopped = threading.Event(), threading.Event()

    def stop_once_leading() -> None:
        """From another thread (this test's loop is blocked by the command): SIGTERM once it leads, never before."""
        with MongoClient(fast_project.uri, **TEST_CLIENT_OPTIONS) as sync:
            deadline = time.monotonic() + 120  # a bound, not a measure
            while not finished.is_set() and time.monotonic() < deadline:
                record = sync[fast_project.db]["_mongoshift_background_watch"].find_one({"_id": "people"}) or {}
                if record.get("state") == "streaming" and (record.get("leader") or {}).get("pid") == os.getpid():
                    stopped.set()
                    os.kill(os.getpid(), signal.SIGTERM)  # the command's handler, set for the time it runs
                    return
                finished.wait(0.1)

    handler = signal.getsignal(signal.SIGTERM)
    stopper = threading.Thread(target=stop_once_leading)
    stopper.start()
    try:
        with pytest.raises(SystemExit) as ended:
            main(["background", "watch", "--collections", "people", "--save-interval", "0.2", "--json"])
    finally:
        finished.set()
        stopper.join()
    out = capsys.readouterr().out
    assert stopped.is_set() and ended.value.code in (0, None), out
    (record,) = json.loads(out)["watch"]
    assert (record["collection"], record["state"]) == ("people", "stopped")
    assert signal.getsignal(signal.SIGTERM) == handler  # the caller's handler is back


async def test_a_version_that_is_not_a_number_is_reported_as_stranded_from_the_stream(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    """``__v: "1"`` written live: no migration upgrades it (audit and verify count it stranded); the stream let it by unseen."""
    s = await completed(fast_project, db)
    watcher = Running(s)
    try:
        await watcher.reached("streaming")
        await db.people.insert_many([{"_id": SECRET_ID, "first": "x", "__v": "1"}, old_doc("old")])
        await until("the upgrade", lambda: upgraded(db, "old"))
        record = await until("the stranded counted", lambda: _saved_with(db, stranded=1, upgraded=1))
    finally:
        await watcher.stop()
    assert record["counters"].get("skipped", 0) == 0 and SECRET_ID not in repr(watcher.events)
