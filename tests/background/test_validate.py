"""``background dry-run --validate``: the server judges each previewed write in a transaction that is always aborted."""

from __future__ import annotations

import json

import pytest
from bson import Int64

from mongoshift import api
from mongoshift.errors import ExitCode, TransactionsUnsupportedError

from ..conftest import fail_command
from .conftest import seed
from .test_preview import database_hash

NAME = "0001_names.py"

FILE = '''
from mongoshift import Background

{body}

background = Background(collection="people", from_version=1, to_version=2, migrate=migrate, batch_size=50, pause_ms=0)
'''

PLAIN = '''
def migrate(doc, ctx):
    doc["full_name"] = doc.pop("first") + " " + doc.pop("last")
    doc["n"] = doc["n"] * 10
    doc["tag"] = "t0" if doc["n"] == 20 else "t" + str(doc["n"])
    return doc
'''


def transform(body: str) -> str:
    return FILE.format(body=body)


async def test_the_validator_and_a_unique_index_refuse_their_documents_and_nothing_stays(project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 5)
    # n > 35 after the rewrite (n=4 -> 40) fails the validator; n=2 takes tag "t0", which n=0 wrote first: a duplicate
    await db.command({"collMod": "people", "validator": {"$jsonSchema": {"properties": {"n": {"bsonType": "int", "maximum": 35}}}}})
    await db.people.create_index("tag", unique=True, sparse=True)
    project.add(NAME, transform(PLAIN))
    before = await database_hash(db)
    preview = await api.preview_background(project.settings(), NAME, first=5, validate=True)
    assert await database_hash(db) == before  # the transaction was aborted: no trace
    status = {row.id: (row.validation.status, row.validation.reason) for row in preview.rows if row.validation}
    assert status[0] == ("ok", None) and status[1] == ("ok", None) and status[3] == ("ok", None)
    assert status[4] == ("failed", "document failed validation (121)")
    assert status[2][0] == "failed" and "11000" in (status[2][1] or "") and "t0" not in (status[2][1] or "")  # value masked
    assert preview.invalid == 2 and preview.refusals == []
    assert preview.rows[0].validation is not None and preview.rows[0].validation.to_json()["status"] == "ok"


async def test_a_revision_that_is_no_number_is_said_as_the_run_and_the_preview_say_it(project, db) -> None:  # type: ignore[no-untyped-def]
    """A legacy ``__rev: "seven"``: ``--validate`` said "write error 14" where the run's failed documents and the
    preview's row say what to do about it (the stored revision is not a number)."""
    await seed(db.people, 3)
    await db.people.update_one({"_id": 1}, {"$set": {"__rev": "seven"}})
    project.add(NAME, transform(PLAIN))
    preview = await api.preview_background(project.settings(), NAME, first=3, validate=True)
    row = next(r for r in preview.rows if r.id == 1)
    assert row.validation is not None and row.validation.status == "failed", row  # the server refused the $inc
    assert (row.validation.reason or "").startswith("the stored __rev is not a number"), row.validation
    assert [r.validation.status for r in preview.rows if r.validation] == ["ok", "failed", "ok"]


async def test_a_revision_at_the_int64_limit_is_said_as_the_run_and_the_preview_say_it(project, db) -> None:  # type: ignore[no-untyped-def]
    """A legacy ``__rev`` at the largest 64-bit integer: the preview said its ``$inc`` overflows, while ``--validate``
    (and the run's failed documents) said only "write error 2" (found in a user trial)."""
    await seed(db.people, 3)
    await db.people.update_one({"_id": 1}, {"$set": {"__rev": Int64(2**63 - 1)}})
    project.add(NAME, transform(PLAIN))
    preview = await api.preview_background(project.settings(), NAME, first=3, validate=True)
    row = next(r for r in preview.rows if r.id == 1)
    assert row.validation is not None and row.validation.status == "failed", row
    assert (row.validation.reason or "").startswith("the stored __rev is the largest 64-bit integer"), row.validation
    assert (row.validation.reason or "").endswith("(BadValue, 2)")


SIDE = '''
async def migrate(doc, ctx):
    await ctx.db.audit.insert_one({"of": doc["_id"]}, session=ctx.session)
    await ctx.db.people.find_one({"_id": doc["_id"]})
    doc["full_name"] = doc.pop("first") + " " + doc.pop("last")
    return doc
'''


async def test_a_side_insert_into_an_ordinary_collection_is_allowed_and_leaves_no_trace(project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 3)
    await db.audit.insert_one({"_id": "existing"})
    project.add(NAME, transform(SIDE))
    before = await database_hash(db)
    preview = await api.preview_background(project.settings(), NAME, first=3, validate=True)
    assert await database_hash(db) == before
    assert preview.refusals == []
    for row in preview.rows:
        assert row.validation is not None and row.validation.status == "ok"
        assert row.validation.operations == [
            {"operation": "find_one", "collection": "people", "count": 1},
            {"operation": "insert_one", "collection": "audit", "count": 1},
        ]
        assert row.validation.side_effects == {"audit.inserted": 1}


REFUSING = '''
from pymongo import WriteConcern
from pymongo.read_preferences import ReadPreference

async def migrate(doc, ctx):
    try:
        {op}
    except Exception:
        pass  # caught: the sandbox reports it all the same
    doc["full_name"] = doc.pop("first") + " " + doc.pop("last")
    return doc
'''

REFUSED = [
    ("drop", "await ctx.db.people.drop()"),
    ("create_index", "await ctx.db.people.create_index('x')"),
    ("get_database", "await ctx.client['elsewhere'].things.insert_one({}, session=ctx.session)"),
    ("get_collection", "await ctx.db['_mongoshift_migrations'].find_one({})"),
    ("get_collection", "await ctx.db['system.views'].find_one({})"),
    ("aggregate $out", "await ctx.db.people.aggregate([{'$out': 'copy'}])"),
    ("aggregate $merge", "await ctx.db.people.aggregate([{'$merge': {'into': 'copy'}}])"),
    ("with_options", "await ctx.db.people.with_options(write_concern=WriteConcern(w=0)).insert_one({})"),
    ("get_collection", "await ctx.db.get_collection('people', read_preference=ReadPreference.SECONDARY).find_one({})"),
    ("command", "await ctx.db.command('ping')"),
    ("start_session", "ctx.client.start_session()"),
    ("commit_transaction", "await ctx.session.commit_transaction()"),
]


@pytest.mark.parametrize(("operation", "code"), REFUSED, ids=[f"{i}-{op}" for i, (op, _) in enumerate(REFUSED)])
async def test_each_refused_operation_is_reported_even_when_caught(project, db, operation, code) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 1)
    project.add(NAME, transform(REFUSING.replace("{op}", code)))
    before = await database_hash(db)
    preview = await api.preview_background(project.settings(), NAME, first=1, validate=True)
    assert await database_hash(db) == before
    assert [r.operation for r in preview.refusals] == [operation]
    assert preview.rows[0].validation is not None and preview.rows[0].validation.status == "ok"  # the transform went on


STEP = '''
from mongoshift import Background

async def step(ctx):
    start = ctx.checkpoint or 0
    cursor = ctx.db.people.find({"_id": {"$gte": start}}).sort("_id", 1).batch_size(2)
    doc = await cursor.next()  # left open on purpose
    await ctx.db.people.update_one({"_id": doc["_id"]}, {"$set": {"__v": 2}}, session=ctx.session)
    return {"checkpoint": doc["_id"] + 1, "done": doc["_id"] >= 1}

background = Background(collection="people", from_version=1, to_version=2, step=step)
'''


async def test_a_step_migration_runs_k_steps_in_one_aborted_transaction(project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 4)
    project.add("0001_step.py", STEP)
    before = await database_hash(db)
    preview = await api.preview_background(project.settings(), "0001_step.py", validate=True, steps=5)
    assert await database_hash(db) == before
    assert preview.stopped == "done" and preview.steps is not None and len(preview.steps) == 2
    first, second = preview.steps
    assert (first.done, first.checkpoint, second.checkpoint) == (False, 1, 2)
    assert first.operations == [{"operation": "find", "collection": "people", "count": 1}, {"operation": "update_one", "collection": "people", "count": 1}]
    assert first.side_effects == {"people.matched": 1, "people.modified": 1}
    assert first.open_cursors == 1
    (image,) = second.images
    assert image["before"]["__v"] == 1 and image["after"]["__v"] == 2 and image["before"]["_id"] == 1
    one = await api.preview_background(project.settings(), "0001_step.py", validate=True)
    assert one.stopped == "steps" and one.steps is not None and len(one.steps) == 1


async def test_a_server_without_transactions_is_a_clear_error(standalone_project, standalone_db) -> None:  # type: ignore[no-untyped-def]
    await seed(standalone_db.people, 1)
    standalone_project.add(NAME, transform(PLAIN))
    # a random sample is read with aggregate, outside the transaction; a standalone refuses the transaction (code 20)
    with pytest.raises(TransactionsUnsupportedError, match="without --validate") as caught:
        await api.preview_background(standalone_project.settings(), NAME, sample=1, validate=True)
    assert caught.value.exit_code == ExitCode.TRANSACTIONS_UNSUPPORTED


def test_the_command_exit_codes_and_json(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    sync_client[project.db].people.insert_many([{"_id": i, "first": "A", "last": "B", "n": i, "__v": 1, "__rev": 1} for i in range(2)])
    project.add(NAME, transform(PLAIN))
    clean = cli(project, "background", "dry-run", NAME, "--first", "2", "--validate", "--json")
    assert clean.returncode == 0, clean.stderr
    body = json.loads(clean.stdout)["preview"]
    assert body["validated"] is True and body["refused"] == [] and body["documents"][0]["validation"]["status"] == "ok"
    project.add(NAME, transform(REFUSING.replace("{op}", "await ctx.db.people.drop()")))
    refused = cli(project, "background", "dry-run", NAME, "--first", "1", "--validate", "--json")
    assert refused.returncode == ExitCode.SANDBOX_REFUSED
    assert json.loads(refused.stdout)["preview"]["refused"] == [
        {"operation": "drop", "target": "the collection people", "reason": "not on the sandbox's allow-list"}
    ]
    plain = cli(project, "background", "dry-run", NAME, "--first", "1", "--validate")
    assert plain.returncode == ExitCode.SANDBOX_REFUSED and "refused\tdrop" in plain.stdout and "validation\tok" in plain.stdout
    assert cli(project, "background", "dry-run", NAME, "--steps", "2").returncode == ExitCode.CONFIG_INVALID


PIPELINE = """
from mongoshift import Background

background = Background(
    collection="people", from_version=1, to_version=2, batch_size=50, pause_ms=0,
    pipeline=[{"$set": {"n": {"$multiply": ["$n", 10]}}}],
)
"""


async def test_a_pipeline_is_validated_by_the_server_and_nothing_stays(project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 5)
    await db.command({"collMod": "people", "validator": {"$jsonSchema": {"properties": {"n": {"bsonType": "int", "maximum": 35}}}}})
    project.add(NAME, PIPELINE)
    before = await database_hash(db)
    preview = await api.preview_background(project.settings(), NAME, first=5, validate=True)
    assert await database_hash(db) == before
    status = {row.id: row.validation.status for row in preview.rows if row.validation}
    assert status == {0: "ok", 1: "ok", 2: "ok", 3: "ok", 4: "failed"}  # n=4 -> 40 breaks the validator
    assert preview.invalid == 1


STEP_WRITE_ERROR = """
from mongoshift import Background
from pymongo.errors import DuplicateKeyError

async def step(ctx):
    {write}
    return {{"checkpoint": 1, "done": False}}

background = Background(collection="people", from_version=1, to_version=2, step=step)
"""

DUPLICATE = "await ctx.db.people.insert_one({'_id': 0}, session=ctx.session)"


@pytest.mark.parametrize("write", [DUPLICATE, f"try:\n        {DUPLICATE}\n    except DuplicateKeyError:\n        pass"], ids=["raised", "caught"])
async def test_a_step_whose_write_the_server_fails_reports_that_error_not_the_aborted_transaction(project, db, write: str) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 2)
    project.add("0001_step.py", STEP_WRITE_ERROR.format(write=write))
    before = await database_hash(db)
    preview = await api.preview_background(project.settings(), "0001_step.py", validate=True, steps=3)
    assert await database_hash(db) == before
    assert preview.stopped == "error" and preview.steps is not None and len(preview.steps) == 1  # no call after the abort
    (step,) = preview.steps
    assert step.error == "the step's insert_one on people failed: duplicate key on _id (index _id_, 11000) (the server aborted the transaction)"
    assert step.operations == [{"operation": "insert_one", "collection": "people", "count": 1}]


SIDE_DUPLICATE = """
async def migrate(doc, ctx):
    try:
        await ctx.db.audit.insert_one({"_id": "once" if doc["_id"] == 1 else doc["_id"]}, session=ctx.session)
    except Exception:
        pass  # caught: the server aborted the transaction all the same
    doc["full_name"] = doc.pop("first") + " " + doc.pop("last")
    return doc
"""


async def test_a_side_write_the_server_fails_refuses_its_document_and_the_others_are_validated(project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 3)
    await db.audit.insert_one({"_id": "once"})
    project.add(NAME, transform(SIDE_DUPLICATE))
    before = await database_hash(db)
    preview = await api.preview_background(project.settings(), NAME, first=3, validate=True)
    assert await database_hash(db) == before
    status = {row.id: (row.validation.status, row.validation.reason) for row in preview.rows if row.validation}
    assert status == {
        0: ("ok", None),
        1: ("failed", "the transform's insert_one on audit failed: duplicate key on _id (index _id_, 11000)"),
        2: ("ok", None),
    }
    refused = next(row for row in preview.rows if row.id == 1)
    assert refused.after is not None and refused.after["full_name"] == "F1 L1"  # shown as transformed when it failed
    assert refused.validation is not None and refused.validation.operations == [{"operation": "insert_one", "collection": "audit", "count": 1}]
    assert "once" not in repr(preview.rows[1].validation)


IN_TRANSACTION = [
    ("aggregate $merge", "await ctx.db.people.aggregate([{'$facet': {'copy': [{'$merge': {'into': 'copy'}}]}}])"),
    ("insert_one", "await ctx.db.audit.insert_one({}, bypass_document_validation=True)"),
]


@pytest.mark.parametrize(("operation", "code"), IN_TRANSACTION, ids=["merge-in-facet", "bypass-validation"])
async def test_what_a_transaction_refuses_is_reported_as_refused_even_when_caught(project, db, operation, code) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 1)
    project.add(NAME, transform(REFUSING.replace("{op}", code)))
    before = await database_hash(db)
    preview = await api.preview_background(project.settings(), NAME, first=1, validate=True)
    assert await database_hash(db) == before
    assert [r.operation for r in preview.refusals] == [operation]


async def test_an_operation_the_server_refuses_in_a_transaction_is_reported_as_refused(project, db, client) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 1)
    project.add(NAME, transform(REFUSING.replace("{op}", "await ctx.db.audit.insert_one({})")))
    async with fail_command(client, {"times": 1}, failCommands=["insert"], errorCode=263, namespace=f"{db.name}.audit"):
        preview = await api.preview_background(project.settings(), NAME, first=1, validate=True)
    assert [(r.operation, r.target, r.reason) for r in preview.refusals] == [("insert_one", "audit", "the server refuses it inside a transaction (263)")]
