"""Converge through the Python API, against the server.

The embedded server serves ``collMod`` (mongoshift.embedded.patches, fix (l)), so
in-place changes run on it as on a real replica set; a server that refuses
``collMod`` is simulated with a fail point.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from bson import Int64
from pymongo.errors import WriteError

from mongoshift.api import collections as cv
from mongoshift.api.options import Lock
from mongoshift.converge.planner import Action
from mongoshift.errors import (
    ConfigInvalidError,
    ConfirmationRequiredError,
    ConvergeFailedError,
    LockHeldError,
    RunAbortedError,
)
from mongoshift.project.lock import LeaseLock
from mongoshift.project.run import RunInfo

from ..conftest import fail_command
from .conftest import journal, server_indexes, settings_with

USERS: dict[str, Any] = {
    "name": "users",
    "indexes": [
        {"keys": {"email": 1}, "name": "by_email", "unique": True, "collation": {"locale": "en", "strength": 2}},
        {"keys": {"seen": 1}, "expireAfterSeconds": 3600},
        {"keys": {"bio": "text"}, "weights": {"bio": 3}},
        {"keys": {"kind": 1, "at": -1}, "partialFilterExpression": {"kind": {"$exists": True}}},
        {"keys": {"loc": "2dsphere"}},
        {"keys": {"old": 1}, "hidden": True, "sparse": True},
    ],
    "validator": {"$jsonSchema": {"bsonType": "object", "properties": {"email": {"bsonType": "string"}}}},
    "versioning": {"current": 2, "min": 1},
}


def kinds(report: cv.ConvergeReport) -> list[tuple[str, str | None, str, str]]:
    return [(a.collection, a.name, a.action, r.status) for r, a in zip(report.results, report.actions, strict=False) if a.action != "unchanged"]


async def test_converge_creates_everything_then_plans_nothing(project, db) -> None:  # type: ignore[no-untyped-def]
    s = settings_with(project, USERS, {"name": "audit", "indexes": []})
    report = await cv.converge(s)
    assert report.success and report.changed and report.unstable == []
    assert [(a.target, a.name) for a in report.actions if a.action == "create"] == [
        ("collection", None),
        ("index", "by_email"),
        ("index", "seen_1"),
        ("index", "bio_text"),
        ("index", "kind_1_at_-1"),
        ("index", "loc_2dsphere"),
        ("index", "old_1"),
        ("index", "__v_1__id_1"),
        ("collection", None),
    ]
    indexes = await server_indexes(db, "users")
    assert indexes["by_email"]["unique"] is True and indexes["seen_1"]["expireAfterSeconds"] == 3600
    assert indexes["old_1"].get("hidden") is True and dict(indexes["__v_1__id_1"]["key"]) == {"__v": 1, "_id": 1}
    assert "audit" in await db.list_collection_names()

    # the validator is in force: versioning rules merged into the user's schema
    await db.users.insert_one({"email": "a@x", "__v": 1, "__rev": 0})
    with pytest.raises(WriteError) as refused:
        await db.users.insert_one({"email": "b@x"})
    assert refused.value.code == 121

    again = await cv.converge(s)
    assert again.in_sync and not again.changed and again.success
    assert len(await journal(db)) == 1  # the run that changed nothing is not logged
    check = await cv.plan_converge(s, check=True)
    assert check.in_sync and check.mode == "check"


async def test_a_date_in_a_filter_or_validator_is_in_place_once_applied(project, db) -> None:  # type: ignore[no-untyped-def]
    """The server hands a date back as naive UTC milliseconds: a TOML date with an offset (or microseconds) never
    compared equal, so --check exited 28 for good and every converge rebuilt the partial index."""
    since = datetime.datetime(2024, 1, 1, 5, 0, 0, 123456, tzinfo=datetime.timezone(datetime.timedelta(hours=5)))
    s = settings_with(
        project,
        {
            "name": "dated",
            "indexes": [{"keys": {"a": 1}, "partialFilterExpression": {"created": {"$gt": since}}}],
            "validator": {"created": {"$gte": since}},
        },
    )
    report = await cv.converge(s)
    assert report.success and report.unstable == []
    check = await cv.plan_converge(s, check=True)
    assert check.in_sync, [a.describe() for a in check.drift]


async def test_a_nan_in_a_filter_or_validator_is_in_place_once_applied(project, db) -> None:  # type: ignore[no-untyped-def]
    """NaN equals nothing, itself included: the validator was 'unstable' for good and the index rebuilt every run."""
    s = settings_with(
        project,
        {
            "name": "rated",
            "indexes": [{"keys": {"r": 1}, "partialFilterExpression": {"r": {"$gt": float("nan")}}}],
            "validator": {"r": {"$ne": float("nan")}},
        },
    )
    report = await cv.converge(s)
    assert report.success and report.unstable == []
    assert (await cv.plan_converge(s, check=True)).in_sync


async def test_journal_records_changing_and_failed_runs(project, db) -> None:  # type: ignore[no-untyped-def]
    s = settings_with(project, {"name": "items", "indexes": [{"keys": {"sku": 1}, "unique": True}]})
    report = await cv.converge(s)
    [entry] = await journal(db)
    assert entry["run_id"] == report.run_id and entry["success"] is True and entry["trigger"] == "converge"
    assert entry["started_at"] is not None and entry["finished_at"] >= entry["started_at"]
    assert entry["executed_by"] and entry["environment"] == "production" and entry["changed"] is True
    assert [(a["target"], a["name"], a["action"], a["status"]) for a in entry["actions"]] == [
        ("collection", None, "create", "applied"),
        ("index", "sku_1", "create", "applied"),
    ]
    assert entry["actions"][1]["to"] == '{"key": {"sku": 1}, "name": "sku_1", "unique": true}'

    await db.create_collection("view_me", viewOn="items", pipeline=[])
    with pytest.raises(ConvergeFailedError):
        await cv.converge(settings_with(project, {"name": "view_me", "indexes": []}))
    failed = (await journal(db))[-1]
    assert failed["success"] is False and "conflict" in failed["error"] and failed["changed"] is False
    assert failed["actions"][0]["status"] == "refused"


@pytest.mark.parametrize("case", ["view", "name with other keys", "twin with other options"])
async def test_a_conflict_refuses_the_whole_run_before_any_write(project, db, case: str) -> None:  # type: ignore[no-untyped-def]
    if case == "view":
        await db.create_collection("users", viewOn="other", pipeline=[])
        conflicting: dict[str, Any] = {"name": "users", "indexes": [{"keys": {"email": 1}}]}
    elif case == "name with other keys":
        await db.users.create_index("email", name="by_email")
        conflicting = {"name": "users", "indexes": [{"keys": {"email": 1, "tenant": 1}, "name": "by_email"}]}
    else:
        await db.users.create_index("email", name="legacy_email")
        conflicting = {"name": "users", "indexes": [{"keys": {"email": 1}, "name": "by_email", "unique": True}]}
    s = settings_with(project, {"name": "first", "indexes": [{"keys": {"a": 1}}]}, conflicting)
    before = await server_indexes(db, "users") if case != "view" else None

    with pytest.raises(ConvergeFailedError) as info:
        await cv.converge(s, confirm=True)
    assert info.value.exit_code == 27 and "nothing was changed" in info.value.message
    assert "first" not in await db.list_collection_names()  # planned before the conflicting one, still not created
    if before is not None:
        assert await server_indexes(db, "users") == before
    body = info.value.details["converge"]
    assert [r["action"] for r in body["actions"] if r["collection"] == "users"] == ["conflict"]

    dry = await cv.plan_converge(s)
    assert [a.collection for a in dry.conflicts] == ["users"] and not dry.success


async def test_a_refused_converge_says_how_long_it_took(project, db, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """The error's copy of the report is taken after its duration is measured, not before (it said 0)."""
    from types import SimpleNamespace

    from mongoshift.converge import orchestrator

    ticks = iter(range(0, 10_000, 2))  # every reading of the clock two seconds after the last one
    monkeypatch.setattr(orchestrator, "time", SimpleNamespace(monotonic=lambda: float(next(ticks))))
    await db.create_collection("users", viewOn="other", pipeline=[])
    with pytest.raises(ConvergeFailedError) as info:
        await cv.converge(settings_with(project, {"name": "users", "indexes": []}))
    assert info.value.details["converge"]["duration_ms"] > 0
    assert (await journal(db))[-1]["duration_ms"] >= info.value.details["converge"]["duration_ms"]


async def test_twin_with_other_options_is_replaced_with_prune(project, db) -> None:  # type: ignore[no-untyped-def]
    await db.users.create_index("email", name="legacy_email")
    s = settings_with(project, {"name": "users", "indexes": [{"keys": {"email": 1}, "name": "by_email", "unique": True}]})
    report = await cv.converge(s, prune=True, confirm=True)
    assert kinds(report) == [("users", "by_email", "rebuild", "applied")]
    indexes = await server_indexes(db, "users")
    assert "legacy_email" not in indexes and indexes["by_email"]["unique"] is True


async def test_rebuild_asks_first(project, db) -> None:  # type: ignore[no-untyped-def]
    await db.events.create_index("kind", name="kind_1", partialFilterExpression={"kind": {"$exists": True}})
    s = settings_with(project, {"name": "events", "indexes": [{"keys": {"kind": 1}, "partialFilterExpression": {"kind": {"$type": "string"}}}]})
    before = await server_indexes(db, "events")

    with pytest.raises(ConfirmationRequiredError, match=r"would drop or rebuild indexes.*events: rebuild index kind_1.*--yes"):
        await cv.converge(s)  # no --yes and nobody to ask
    asked: list[list[Action]] = []

    async def no(actions: list[Action]) -> bool:
        asked.append(actions)
        return False

    with pytest.raises(RunAbortedError, match="nothing was changed"):
        await cv.converge(s, confirm=no)
    assert [(a.name, a.action) for a in asked[0]] == [("kind_1", "rebuild")]
    assert await server_indexes(db, "events") == before

    with pytest.raises(ConfigInvalidError, match="must answer True or False, not str"):
        await cv.converge(s, confirm=lambda actions: "yes")  # a plain function is asked too; its answer is checked
    report = await cv.converge(s, confirm=lambda actions: True)
    assert kinds(report) == [("events", "kind_1", "rebuild", "applied")]
    assert (await server_indexes(db, "events"))["kind_1"]["partialFilterExpression"] == {"kind": {"$type": "string"}}
    assert (await cv.plan_converge(s)).in_sync


async def test_prune_only_with_prune_and_never_the_id_index(project, db) -> None:  # type: ignore[no-untyped-def]
    await db.things.create_index("extra", name="extra_1")
    await db.things.create_index("kept", name="kept_1")
    declaration = {"name": "things", "indexes": [{"keys": {"kept": 1}}]}
    s = settings_with(project, declaration)

    report = await cv.converge(s)
    assert kinds(report) == [("things", "extra_1", "keep", "ok")] and not report.changed
    assert "extra_1" in await server_indexes(db, "things")

    with pytest.raises(ConfirmationRequiredError, match="things: drop index extra_1"):
        await cv.converge(s, prune=True)
    report = await cv.converge(s, prune=True, confirm=True)
    assert kinds(report) == [("things", "extra_1", "drop", "applied")]
    assert set(await server_indexes(db, "things")) == {"_id_", "kept_1"}

    # prune = true in the declaration, and nothing declared: everything but _id_ goes
    report = await cv.converge(settings_with(project, {**declaration, "indexes": [], "prune": True}), confirm=True)
    assert kinds(report) == [("things", "kept_1", "drop", "applied")]
    assert set(await server_indexes(db, "things")) == {"_id_"}


async def test_refused_collmod_falls_back_to_a_rebuild_only_with_consent(project, client, db) -> None:  # type: ignore[no-untyped-def]
    """A server that refuses collMod (made to refuse by a fail point)."""
    await db.sessions.create_index("seen", name="seen_1", expireAfterSeconds=3600)
    s = settings_with(project, {"name": "sessions", "indexes": [{"keys": {"seen": 1}, "expireAfterSeconds": 60}]})
    plan = await cv.plan_converge(s)
    assert [(a.name, a.action, a.changes) for a in plan.drift] == [("seen_1", "modify", ("expireAfterSeconds",))]

    async with fail_command(client, {"times": 1}, failCommands=["collMod"], errorCode=59):
        with pytest.raises(ConvergeFailedError, match=r"refused the in-place change.*--yes to rebuild") as info:
            await cv.converge(s)  # not destructive as planned, so nobody was asked; the fallback needs consent
    assert (await server_indexes(db, "sessions"))["seen_1"]["expireAfterSeconds"] == 3600
    [row] = [r for r in info.value.details["converge"]["actions"] if r["name"] == "seen_1"]
    assert (row["action"], row["status"]) == ("rebuild", "failed")

    async with fail_command(client, {"times": 1}, failCommands=["collMod"], errorCode=59):
        report = await cv.converge(s, confirm=True)
    [result] = [r for r in report.results if r.action.name == "seen_1"]
    assert (result.action.action, result.status) == ("rebuild", "applied") and "refused collMod" in (result.action.reason or "")
    assert (await server_indexes(db, "sessions"))["seen_1"]["expireAfterSeconds"] == 60


async def test_min_guard_refuses_while_old_documents_remain(project, db) -> None:  # type: ignore[no-untyped-def]
    v1 = {"name": "docs", "versioning": {"current": 1, "min": 1}}
    await cv.converge(settings_with(project, v1))
    await db.docs.insert_many([{"n": i, "__v": 1, "__rev": 0} for i in range(20)])
    v2 = settings_with(project, {"name": "docs", "versioning": {"current": 2, "min": 2}})

    with pytest.raises(ConvergeFailedError) as info:
        await cv.converge(v2)
    message = info.value.message
    assert "raising min to 2 is refused" in message and "rewrite those documents first" in message and "or declare min = 0 until then" in message
    assert "ObjectId" not in str(info.value.details)  # ids are never shown
    plan = await cv.plan_converge(v2)
    assert [(a.target, a.action) for a in plan.conflicts] == [("validator", "conflict")]

    await db.docs.update_many({}, {"$set": {"__v": 2}, "$inc": {"__rev": 1}})
    plan = await cv.plan_converge(v2)
    assert plan.conflicts == [] and [(a.target, a.action) for a in plan.drift] == [("validator", "modify")]
    after = plan.drift[0].after
    assert after is not None and after["validator"]["$jsonSchema"]["properties"]["__v"] == {"bsonType": "int", "minimum": 2}

    # a document without a version counts as version 0
    await db.docs.insert_one({"n": 99, "__rev": 0, "__v": None}, bypass_document_validation=True)
    assert [(a.target, a.action) for a in (await cv.plan_converge(v2)).conflicts] == [("validator", "conflict")]


MISSING = object()


@pytest.mark.parametrize("revision", [MISSING, None, "3", 2.5, -1, [1]])
async def test_min_guard_refuses_while_a_document_has_no_valid_revision(project, db, revision: object) -> None:  # type: ignore[no-untyped-def]
    """The rule about to be set requires the revision too (an int or a long, at least 0): only the version was
    checked, so such a document's next plain write failed validation (121) once min was raised."""
    await db.revs.insert_one({"n": 1, "__v": 1, "__rev": Int64(4)})  # a long is a valid revision
    doc: dict[str, Any] = {"n": 2, "__v": 1}
    if revision is not MISSING:
        doc["__rev"] = revision
    await db.revs.insert_one(doc)
    declared = settings_with(project, {"name": "revs", "validator": {"n": {"$exists": True}}, "versioning": {"current": 1, "min": 1}})
    with pytest.raises(ConvergeFailedError) as info:
        await cv.converge(declared)
    assert "a document has no valid __rev" in info.value.message and "(0 where it is missing)" in info.value.message
    await db.revs.update_many({}, {"$set": {"__rev": 0}})
    assert (await cv.converge(declared)).success
    await db.revs.update_one({"n": 2}, {"$set": {"n": 3}})  # the write that was refused


async def test_min_guard_then_applies_after_the_rewrite(project, db) -> None:  # type: ignore[no-untyped-def]
    """collMod changes the validator of the existing collection."""
    await cv.converge(settings_with(project, {"name": "docs", "versioning": {"current": 1, "min": 1}}))
    await db.docs.insert_many([{"n": i, "__v": 1, "__rev": 0} for i in range(5)])
    v2 = settings_with(project, {"name": "docs", "versioning": {"current": 2, "min": 2}})
    with pytest.raises(ConvergeFailedError):
        await cv.converge(v2)
    await db.docs.update_many({}, {"$set": {"__v": 2}, "$inc": {"__rev": 1}})
    report = await cv.converge(v2)
    assert [(a.target, a.action) for a in report.actions if a.changing] == [("validator", "modify")]
    with pytest.raises(WriteError):
        await db.docs.insert_one({"n": 6, "__v": 1, "__rev": 0})
    assert (await cv.plan_converge(v2)).in_sync


async def test_in_place_modifies_ttl_hidden_unique_and_validator(project, db) -> None:  # type: ignore[no-untyped-def]
    """collMod changes the index without dropping it."""
    await db.create_collection("mods", validator={"a": {"$exists": True}})
    await db.mods.create_index("seen", name="seen_1", expireAfterSeconds=3600)
    await db.mods.create_index("h", name="h_1")
    await db.mods.create_index("u", name="u_1")
    s = settings_with(
        project,
        {
            "name": "mods",
            "indexes": [
                {"keys": {"seen": 1}, "expireAfterSeconds": 60},
                {"keys": {"h": 1}, "hidden": True},
                {"keys": {"u": 1}, "unique": True},
            ],
            "validator": {"b": {"$exists": True}},
            "validation_action": "warn",
        },
    )
    report = await cv.converge(s)  # no --yes needed: nothing destructive
    assert sorted((a.target, a.name, a.action) for a in report.actions if a.changing) == [
        ("index", "h_1", "modify"),
        ("index", "seen_1", "modify"),
        ("index", "u_1", "modify"),
        ("validator", None, "modify"),
    ]
    assert all(r.status == "applied" for r in report.results if r.action.changing)
    indexes = await server_indexes(db, "mods")
    assert indexes["seen_1"]["expireAfterSeconds"] == 60 and indexes["h_1"]["hidden"] is True and indexes["u_1"]["unique"] is True
    [info] = [c async for c in await db.list_collections(filter={"name": "mods"})]
    assert info["options"]["validator"] == {"b": {"$exists": True}} and info["options"]["validationAction"] == "warn"
    assert (await cv.plan_converge(s)).in_sync


async def test_unique_conversion_fails_on_duplicates_and_leaves_the_index(project, db) -> None:  # type: ignore[no-untyped-def]
    """359 CannotConvertIndexToUnique leaves the index as it was: listed without ``unique`` (fix (cr) here)."""
    await db.dups.create_index("u", name="u_1")
    await db.dups.insert_many([{"u": 1}, {"u": 1}])
    s = settings_with(project, {"name": "dups", "indexes": [{"keys": {"u": 1}, "unique": True}]})
    with pytest.raises(ConvergeFailedError) as failed:
        await cv.converge(s)
    assert "unique" not in (await server_indexes(db, "dups"))["u_1"]
    assert "remove them (or declare the index without unique)" in str(failed.value.details)


def test_a_failed_conversion_to_unique_says_what_to_do() -> None:
    """359 CannotConvertIndexToUnique got no advice, where a failed unique build (11000) did."""
    from pymongo.errors import OperationFailure

    from mongoshift.converge.applier import build_failure

    said = build_failure(OperationFailure("Cannot convert the index to unique", 359, {"code": 359, "codeName": "CannotConvertIndexToUnique"}))
    assert said.endswith("the collection holds duplicates of this key: remove them (or declare the index without unique), then converge again")


@pytest.mark.parametrize(
    ("code", "reason", "advice"),
    [
        (16755, "Can't extract geo keys: { _id: 7, home: \"Alice's\" }  lng: 200 lat: 100", "a document holds a value this geo index cannot take"),
        (13027, "point not in interval of [ -180, 180 ] :: caused by :: { _id: 7, home: \"Alice's\" }", "a document holds a value"),
        (17262, "language override unsupported: Alice's", "declare language_override as a field the documents do not use"),
    ],
)
def test_an_index_build_that_fails_on_a_documents_value_says_what_to_do_without_it(code: int, reason: str, advice: str) -> None:
    """The server's message quotes the document (or the value) the build failed on; it was shown and logged."""
    from pymongo.errors import OperationFailure

    from mongoshift.converge.applier import build_failure

    message = f"Index build failed: 6cb4: Collection app.places ( a82 ) :: caused by :: {reason}"
    said = build_failure(OperationFailure(message, code, {"code": code, "codeName": f"Location{code}", "errmsg": message}))
    assert advice in said and "Alice" not in said and "200" not in said


async def test_converge_takes_the_lock(project, db) -> None:  # type: ignore[no-untyped-def]
    s = settings_with(project, {"name": "locked", "indexes": [{"keys": {"a": 1}}]})
    holder = LeaseLock(db[s.lock_collection], RunInfo("other-run", "someone", "elsewhere", "production"), ttl_seconds=60)
    assert await holder.try_acquire()
    try:
        with pytest.raises(LockHeldError):
            await cv.converge(s)
        assert "locked" not in await db.list_collection_names()
        report = await cv.converge(s, lock=Lock(take=False))
        assert report.changed
    finally:
        await holder.release()


async def test_who_asked_and_why_are_recorded_redacted_and_bounded(project, db) -> None:  # type: ignore[no-untyped-def]
    s = settings_with(project, {"name": "items", "indexes": [{"keys": {"sku": 1}}]})
    report = await cv.converge(s, requested_by="release-bot", reason="deploy 42\x07 uri mongodb://app:hunter2@db1/shop")
    [entry] = await journal(db)
    assert entry["requested_by"] == "release-bot" and report.requested_by == "release-bot"
    assert entry["reason"] == "deploy 42 uri mongodb://***@db1/shop" == report.reason  # no credential, no control
    assert report.to_json()["reason"] == entry["reason"]

    s2 = settings_with(project, {"name": "items", "indexes": [{"keys": {"sku": 1}}, {"keys": {"at": 1}}]})
    await cv.converge(s2)
    entry = (await journal(db))[-1]
    assert entry["requested_by"] == entry["executed_by"] and entry["reason"] is None  # who ran it, when nobody says

    for bad, message in (({"reason": "x" * 513}, "reason"), ({"requested_by": "y" * 129}, "requested_by"), ({"reason": " "}, "reason")):
        with pytest.raises(ConfigInvalidError, match=message):
            await cv.converge(s2, **bad)  # type: ignore[arg-type]
    assert len(await journal(db)) == 2


async def test_a_declarations_own_prune_false_wins_over_the_call(project, db) -> None:  # type: ignore[no-untyped-def]
    await db.shared.create_index("theirs", name="theirs_1")
    await db.mine.create_index("extra", name="extra_1")
    s = settings_with(
        project,
        {"name": "shared", "indexes": [{"keys": {"ours": 1}}], "prune": False},  # other tools create indexes here
        {"name": "mine", "indexes": [{"keys": {"ours": 1}}]},
    )
    report = await cv.converge(s, prune=True, confirm=True)
    assert ("shared", "theirs_1", "keep", "ok") in kinds(report) and ("mine", "extra_1", "drop", "applied") in kinds(report)
    assert set(await server_indexes(db, "shared")) == {"_id_", "ours_1", "theirs_1"}
    assert set(await server_indexes(db, "mine")) == {"_id_", "ours_1"}


async def test_one_list_collections_reads_every_declared_collection(project, mongo_uri) -> None:  # type: ignore[no-untyped-def]
    from pymongo import AsyncMongoClient
    from pymongo.monitoring import CommandListener, CommandStartedEvent

    from ..conftest import TEST_CLIENT_OPTIONS

    class Count(CommandListener):
        def __init__(self) -> None:
            self.names: list[str] = []

        def started(self, event: CommandStartedEvent) -> None:
            wanted = str((event.command.get("filter") or {}).get("name"))
            if event.command_name != "listCollections" or "_mongoshift" not in wanted:  # not the own collections' check
                self.names.append(event.command_name)

        def succeeded(self, event: object) -> None: ...

        def failed(self, event: object) -> None: ...

    s = settings_with(project, *({"name": f"c{i}", "indexes": [{"keys": {"a": 1}}]} for i in range(5)))
    counted = Count()
    client: AsyncMongoClient[Any] = AsyncMongoClient(mongo_uri, event_listeners=[counted], **TEST_CLIENT_OPTIONS)
    try:
        plan = await cv.plan_converge(s, client=client)
        assert len(plan.drift) == 10
        assert counted.names.count("listCollections") == 1, counted.names
        counted.names.clear()
        await cv.converge(s, client=client)
        # plan, then per changed collection the re-plan before applying it, then the check after applying
        assert counted.names.count("listCollections") == 1 + 5 + 1, counted.names
    finally:
        await client.close()


async def test_a_failing_converge_log_warns_and_the_run_goes_on(project, db, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    from pymongo.errors import OperationFailure

    from mongoshift.converge.journal import ConvergeJournal

    async def refused(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[no-untyped-def]
        raise OperationFailure("not authorized on shop to execute command", code=13)

    monkeypatch.setattr(ConvergeJournal, "_ensure_index", refused)
    s = settings_with(project, {"name": "items", "indexes": [{"keys": {"sku": 1}}]})
    report = await cv.converge(s)
    assert report.success and report.changed
    assert "sku_1" in await server_indexes(db, "items")
    assert any("could not write the converge log" in w and "13" in w for w in report.warnings), report.warnings
    assert await journal(db) == []


async def test_a_collection_created_between_plan_and_apply_is_converged(project, db, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The application creates the collection after converge read it as missing: its ``create`` then
    meets an existing collection, which is planned again and converged, not a failed run."""
    from mongoshift.converge import applier

    real = applier.inspect
    created: list[str] = []

    async def read_then_the_app_creates_it(db_, declaration, **kwargs):  # type: ignore[no-untyped-def]
        state = await real(db_, declaration, **kwargs)
        if declaration.name == "late" and not created:
            created.append("late")
            await db.create_collection("late")
            await db.late.create_index("b", name="b_1")
        return state

    monkeypatch.setattr(applier, "inspect", read_then_the_app_creates_it)
    s = settings_with(project, {"name": "late", "indexes": [{"keys": {"a": 1}}], "validator": {"a": {"$exists": True}}})
    report = await cv.converge(s)
    assert report.success and created == ["late"]
    rows = {(a.target, a.name, a.action): r.status for r, a in zip(report.results, report.actions, strict=False)}
    assert rows[("validator", None, "modify")] == "applied" and rows[("index", "a_1", "create")] == "applied"
    assert ("collection", None, "create") not in rows  # reported as what was done
    assert set(await server_indexes(db, "late")) == {"_id_", "a_1", "b_1"}
    [info] = [c async for c in await db.list_collections(filter={"name": "late"})]
    assert info["options"]["validator"] == {"a": {"$exists": True}}


async def test_an_empty_index_list_with_prune_warns_that_every_index_goes(project, db) -> None:  # type: ignore[no-untyped-def]
    await db.things.create_index("a", name="a_1")
    await db.things.create_index("b", name="b_1")
    s = settings_with(project, {"name": "things", "indexes": []})
    plan = await cv.plan_converge(s, prune=True)
    [warning] = [w for w in plan.warnings if "indexes = []" in w]
    assert "things" in warning and "every index but _id_" in warning and "2" in warning
    report = await cv.converge(s, prune=True, confirm=True)
    assert any("indexes = []" in w for w in report.warnings)
    assert set(await server_indexes(db, "things")) == {"_id_"}
    assert not any("indexes = []" in w for w in (await cv.plan_converge(s, prune=True)).warnings)  # nothing left to drop


async def test_a_clustered_collections_own_index_is_never_planned(project, db, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """MongoDB 5.3+ lists a clustered collection's index under its own name (the embedded server does not)."""
    from pymongo.asynchronous.collection import AsyncCollection

    listed = AsyncCollection.list_indexes

    async def with_the_clustered_index(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        docs = [doc async for doc in await listed(self, *args, **kwargs)]
        if self.name == "clustered":
            docs.append({"v": 2, "key": {"_id": 1}, "name": "cluster", "unique": True, "clustered": True})

        async def each():  # type: ignore[no-untyped-def]
            for doc in docs:
                yield doc

        return each()

    monkeypatch.setattr(AsyncCollection, "list_indexes", with_the_clustered_index)
    await db.create_collection("clustered")
    s = settings_with(project, {"name": "clustered", "indexes": [{"keys": {"a": 1}}]})
    plan = await cv.plan_converge(s, prune=True)
    assert [(a.name, a.action) for a in plan.actions] == [("a_1", "create")]
    report = await cv.converge(s, prune=True, confirm=True)
    assert report.success and (await cv.plan_converge(s, prune=True, check=True)).in_sync


async def test_min_zero_under_a_strict_validator_takes_a_null_version_and_revision(project, db) -> None:  # type: ignore[no-untyped-def]
    """``min = 0`` is typed but not required; a null version or revision counts as 0 (docs/versioning.md), and a
    version stored as ``1.0`` is version 1 to the engine. The typed rule (``int``) refused both, so a legacy document
    holding one could not be written at all under a strict validator (121)."""
    from bson import Decimal128, Int64
    from pymongo.errors import WriteError

    await db.docs.insert_many([
        {"email": "a", "__v": None, "__rev": None}, {"email": "b", "__v": 1, "__rev": 3}, {"email": "c"},
        {"email": "d", "__v": 1.0}, {"email": "e", "__v": Int64(1)}, {"email": "f", "__v": Decimal128("1")},
    ])
    strict = {"name": "docs", "validator": {"$jsonSchema": {"required": ["email"]}}, "versioning": {"current": 2, "min": 0}}
    assert (await cv.converge(settings_with(project, strict))).success
    for email in "abcdef":  # the application's plain write of another field
        assert (await db.docs.update_one({"email": email}, {"$set": {"seen": True}})).modified_count == 1
    for junk in ("2", True, -1):  # the rule still keeps out what no reader takes for a version
        with pytest.raises(WriteError):
            await db.docs.update_one({"email": "a"}, {"$set": {"__v": junk}})
    assert (await cv.plan_converge(settings_with(project, strict), check=True)).in_sync


@pytest.mark.parametrize("stored", ["2", 2.0, True, {"$numberLong": "2"}, [2]], ids=["string", "double", "bool", "long", "array"])
async def test_min_guard_counts_a_wrong_typed_version_as_below(project, db, stored: Any) -> None:  # type: ignore[no-untyped-def]
    """A version the new rule (``bsonType: "int"``) would refuse is not a valid version: raising min is refused
    while one is stored, as for a version below min, and plan and converge say the same."""
    from bson.int64 import Int64

    value = Int64(2) if isinstance(stored, dict) else stored
    await cv.converge(settings_with(project, {"name": "docs", "versioning": {"current": 2, "min": 0}}))
    await db.docs.insert_many([{"n": i, "__v": 2, "__rev": 0} for i in range(3)])
    await db.docs.insert_one({"n": 3, "__v": value, "__rev": 0}, bypass_document_validation=True)
    v2 = settings_with(project, {"name": "docs", "versioning": {"current": 2, "min": 2}})

    [conflict] = (await cv.plan_converge(v2)).conflicts
    assert conflict.target == "validator" and "not an int" in (conflict.reason or "")
    with pytest.raises(ConvergeFailedError):
        await cv.converge(v2)

    await db.docs.update_one({"n": 3}, {"$set": {"__v": 2}}, bypass_document_validation=True)
    assert (await cv.plan_converge(v2)).conflicts == []


async def test_a_new_strict_validator_that_existing_documents_fail_is_a_warning(project, db) -> None:  # type: ignore[no-untyped-def]
    """Converging a strict validator onto legacy data said nothing of the documents that fail it: collMod does not
    check them, and each one's next update was then refused (121) in production. The plan now warns, naming the
    collection, never a document or its id; a validator that every document passes, or a moderate one, does not."""
    await db.users.insert_many([{"_id": 1, "email": "a@x"}, {"_id": "s2", "email": None}, {"_id": 3}])
    validator = {"$jsonSchema": {"bsonType": "object", "required": ["email"], "properties": {"email": {"bsonType": "string"}}}}
    strict = settings_with(project, {"name": "users", "validator": validator})
    plan = await cv.plan_converge(strict)
    [warning] = [w for w in plan.warnings if "does not match" in w]
    assert warning.startswith("users: ") and "next update" in warning and "validation_level" in warning, warning
    assert "s2" not in str(plan.to_json()) and "a@x" not in str(plan.to_json())

    moderate = settings_with(project, {"name": "users", "validator": validator, "validation_level": "moderate"})
    assert not [w for w in (await cv.plan_converge(moderate)).warnings if "does not match" in w]
    warn = settings_with(project, {"name": "users", "validator": validator, "validation_action": "warn"})
    assert not [w for w in (await cv.plan_converge(warn)).warnings if "does not match" in w]

    report = await cv.converge(strict)  # a warning, not a refusal: the validator is set
    assert report.success and any("does not match" in w for w in report.warnings)
    await db.users.update_many({}, {"$set": {"email": "fixed"}}, bypass_document_validation=True)
    assert (await cv.plan_converge(strict)).in_sync
    other = {"$jsonSchema": {"bsonType": "object", "required": ["email"]}}
    assert not [w for w in (await cv.plan_converge(settings_with(project, {"name": "users", "validator": other}))).warnings if "does not match" in w]


async def test_a_missing_collection_whose_name_differs_in_case_only_from_one_stored_is_a_warning(project, db) -> None:  # type: ignore[no-untyped-def]
    """Declaring ``users`` on a legacy database whose data is in ``Users`` created a second, empty collection beside it,
    with the indexes and validator meant for the data, without a word. The plan now names the stored collection."""
    await db.Users.insert_one({"email": "a@x"})
    s = settings_with(project, {"name": "users", "indexes": [{"keys": {"email": 1}}]})
    plan = await cv.plan_converge(s)
    [warning] = [w for w in plan.warnings if "case" in w]
    assert warning.startswith("users: ") and "'Users'" in warning, warning
    assert [(a.target, a.action) for a in plan.drift] == [("collection", "create"), ("index", "create")]
    report = await cv.converge(s)  # a warning, not a refusal: the names are two collections to the server
    assert report.success and any("case" in w for w in report.warnings)
    assert not [w for w in (await cv.plan_converge(s)).warnings if "case" in w]  # 'users' exists now: it is the one declared
