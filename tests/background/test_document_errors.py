"""Every per-document server error fails only its document (issue 24, item 1).

A write error in a bulk's reply is about its own statement: whatever code one document's
contents make the server answer with, that document fails and the rest of the batch, the
migration and its counts go on as if it were not there.
"""

from __future__ import annotations

from typing import Any

import pytest
from bson import Int64
from pymongo import UpdateOne
from pymongo.asynchronous.database import AsyncDatabase

from mongoshift.api import background as bg, migrations as command
from mongoshift.background.write.batch import _write

from ..conftest import Project
from .conftest import background_file, seed

NAME = "0001_names.py"
BUDGET = "max_document_errors=10,"
#: Document 9's slug: a number where the validator wants a string, or the slug of document 8.
SLUG = "    doc['slug'] = {bad} if doc['_id'] == 9 else f\"s{{doc['_id']}}\"\n    return doc"


async def revision_is_a_string(db: AsyncDatabase[Any]) -> str:
    """The issue's case: ``$inc`` of the revision fails with TypeMismatch (14)."""
    await db.people.update_one({"_id": 9}, {"$set": {"__rev": "x"}})
    return background_file(batch_size=100, extra=BUDGET)


async def revision_is_a_subdocument(db: AsyncDatabase[Any]) -> str:
    """``$inc`` on a non-number of another kind (14)."""
    await db.people.update_one({"_id": 9}, {"$set": {"__rev": {"n": 1}}})
    return background_file(batch_size=100, extra=BUDGET)


async def revision_at_the_int64_limit(db: AsyncDatabase[Any]) -> str:
    """Legacy data: a revision at the largest 64-bit integer, which ``$inc`` cannot pass (BadValue, 2)."""
    await db.people.update_one({"_id": 9}, {"$set": {"__rev": Int64(2**63 - 1)}})
    return background_file(batch_size=100, extra=BUDGET)


async def validator_refuses(db: AsyncDatabase[Any]) -> str:
    """DocumentValidationFailure (121)."""
    await db.command({"collMod": "people", "validator": {"$or": [{"slug": {"$exists": False}}, {"slug": {"$type": "string"}}]}})
    return background_file(batch_size=100, extra=BUDGET).replace("    return doc", SLUG.format(bad="9"))


async def duplicate_key(db: AsyncDatabase[Any]) -> str:
    """DuplicateKey (11000): documents 8 and 9 get the same slug, one of them fails."""
    await db.people.create_index("slug", unique=True, sparse=True)
    return background_file(batch_size=100, extra=BUDGET).replace("    return doc", SLUG.format(bad="'s8'"))


async def pipeline_cannot_evaluate(db: AsyncDatabase[Any]) -> str:
    """A pipeline expression that cannot evaluate on one document (``$add`` of a string, 14 or 16554)."""
    await db.people.update_one({"_id": 9}, {"$set": {"n": "x"}})
    return background_file(batch_size=100, extra=BUDGET).replace(
        "migrate=migrate,", "pipeline=[{'$set': {'n': {'$add': ['$n', 1]}}}],"
    )


@pytest.mark.parametrize(
    "make_bad",
    [revision_is_a_string, revision_is_a_subdocument, revision_at_the_int64_limit, validator_refuses, duplicate_key, pipeline_cannot_evaluate],
    ids=lambda f: f.__name__,
)
async def test_one_bad_document_fails_alone_and_the_counts_are_exact(fast_project: Project, db: AsyncDatabase[Any], make_bad: Any) -> None:
    await seed(db.people, 10)
    fast_project.add(NAME, await make_bad(db))
    await command.up(fast_project.settings())
    (result,) = await bg.run(fast_project.settings(), [NAME])
    assert (result.status, result.last_error) == ("completed", None)
    assert result.failed_documents == 1
    assert await db.people.count_documents({"__v": 2}) == 9
    (report,) = await bg.status(fast_project.settings(), NAME)
    assert report.totals["migrated"] == 9 and report.totals["failed"] == 1
    assert report.remaining == 0
    assert [w for w in report.warnings if w.startswith("completed with 1 document that could not be migrated")] != []
    (entry,) = report.doc_error_counts
    assert entry["reason"] == "write" and entry["count"] == 1
    if make_bad in (revision_is_a_string, revision_is_a_subdocument):  # said as the preview says it, with its code
        assert entry["code"] == 14 and "the stored __rev is not a number" in report.doc_errors[0]["error"]
    if make_bad is revision_at_the_int64_limit:
        assert "the stored __rev is the largest 64-bit integer" in report.doc_errors[0]["error"]  # not "write error 2"
        assert entry["code"] == 2 and await db.people.find_one({"_id": 9}, {"_id": 0, "__v": 1, "__rev": 1}) == {"__v": 1, "__rev": 2**63 - 1}


async def test_each_server_code_of_a_documents_write_is_that_documents(db: AsyncDatabase[Any]) -> None:
    """The write path's own judgement, code by code, on what the server answers: one bulk of
    seven updates, each of the first six refused for its document, the last one written."""
    await db.create_collection("strict", validator={"$or": [{"a": {"$exists": False}}, {"a": {"$type": "int"}}]})
    await db.strict.create_index("u", unique=True, sparse=True)
    await db.strict.insert_many(
        [{"_id": 1, "r": "x"}, {"_id": 2, "m": "s"}, {"_id": 3, "m": {}}, {"_id": 4}, {"_id": 5, "u": 1}, {"_id": 6}, {"_id": 7},
         {"_id": 8, "r": Int64(2**63 - 1)}]
    )
    table = [
        (UpdateOne({"_id": 1}, {"$inc": {"r": 1}}), 14),  # TypeMismatch: $inc on a non-number
        (UpdateOne({"_id": 2}, {"$set": {"m.b": 1}}), 28),  # PathNotViable
        (UpdateOne({"_id": 3}, {"$set": {"m": 1, "m.b": 2}}), 40),  # ConflictingUpdateOperators: a path conflict
        (UpdateOne({"_id": 4}, {"$set": {"a": "not an int"}}), 121),  # DocumentValidationFailure
        (UpdateOne({"_id": 6}, {"$set": {"u": 1}}), 11000),  # DuplicateKey
        (UpdateOne({"_id": 8}, {"$inc": {"r": 1}}), 2),  # BadValue: an $inc past the int64 range
        (UpdateOne({"_id": 7}, {"$set": {"u": 2}}), None),  # written
    ]
    matched, failed = await _write(db.strict, [op for op, _ in table], session=None)
    assert matched == 1
    assert {index: error["code"] for index, error in failed.items()} == {i: code for i, (_, code) in enumerate(table) if code is not None}
    assert (await db.strict.find_one({"_id": 7}) or {}).get("u") == 2


async def test_a_transforms_python_error_never_stores_the_value_it_quoted(fast_project: Project, db: AsyncDatabase[Any]) -> None:
    """``int(doc["full_name"])`` raises ``invalid literal for int() with base 10: 'F3 L3'``: the stored error, the
    status and its JSON keep the error's kind and words, not the document's value; a missing key keeps its name."""
    await seed(db.people, 10)
    transform = "    if doc['_id'] == 4:\n        doc['missing_field']\n    doc['n'] = int(doc['full_name']) if doc['_id'] == 3 else doc['n']\n    return doc"
    fast_project.add(NAME, background_file(batch_size=100, extra=BUDGET).replace("    return doc", transform))
    await command.up(fast_project.settings())
    (result,) = await bg.run(fast_project.settings(), [NAME])
    assert result.status == "completed" and result.failed_documents == 2
    (report,) = await bg.status(fast_project.settings(), NAME)
    said = sorted(entry["error"] for entry in report.doc_errors)
    assert said == ["'missing_field'", "invalid literal for int() with base 10: '***'"], said
    assert "F3" not in str(report.to_json())


async def test_a_key_error_quoting_a_documents_value_is_masked(fast_project: Project, db: AsyncDatabase[Any]) -> None:
    """A lookup keyed by a document's value (``prices[doc["first"]]``, ``counts[doc["n"]]``) raises a ``KeyError``
    that quotes the value, not a name: it is masked like any other value, while a missing field keeps its name."""
    await seed(db.people, 10)
    await db.people.update_one({"_id": 3}, {"$set": {"n": 7777}})  # a number no other field of the document holds
    lookups = (
        "def migrate(doc, ctx):\n"
        "    if doc['_id'] == 2:\n        {}[doc['first']]\n"
        "    if doc['_id'] == 3:\n        {}[doc['n']]\n"
        "    if doc['_id'] == 4:\n        doc['missing_field']\n"
        "    if doc['_id'] == 5:\n        {}[doc['first'].lower() + '-x']\n"  # a key worked out from a value: no value equals it
        "    if doc['_id'] == 6:\n        doc[ABSENT]\n"  # a module-level name for a field
    )
    source = "ABSENT = 'absent_field'\n" + background_file(batch_size=100, extra=BUDGET).replace("def migrate(doc, ctx):\n", lookups)
    fast_project.add(NAME, source)
    await command.up(fast_project.settings())
    (result,) = await bg.run(fast_project.settings(), [NAME])
    assert result.status == "completed" and result.failed_documents == 5
    (report,) = await bg.status(fast_project.settings(), NAME)
    said = sorted(entry["error"] for entry in report.doc_errors)
    assert said == ["'***'", "'absent_field'", "'missing_field'", "***"], said  # docs 2 and 5 said the same
    shown = str(report.to_json())
    assert "F2" not in shown and "7777" not in shown and "f5" not in shown


async def test_an_async_transform_that_calls_sys_exit_fails_its_document_not_the_run(fast_project: Project, db: AsyncDatabase[Any]) -> None:
    """``sys.exit`` in an ``async def`` transform ended the whole run (exit 1, its message, a document's value,
    on stderr, the lease held); as in a plain ``def`` one, it is that document's failure."""
    await seed(db.people, 10)
    exiting = "async def migrate(doc, ctx):\n    if doc['_id'] == 3:\n        import sys\n        sys.exit(f\"bye {doc['first']}\")\n"
    fast_project.add(NAME, background_file(batch_size=100, extra=BUDGET).replace("def migrate(doc, ctx):\n", exiting))
    await command.up(fast_project.settings())
    (result,) = await bg.run(fast_project.settings(), [NAME])
    assert result.status == "completed" and result.failed_documents == 1
    assert await db.people.count_documents({"__v": 2}) == 9
    (report,) = await bg.status(fast_project.settings(), NAME)
    (entry,) = report.doc_errors
    assert entry["error_class"] == "UserCodeExit" and "F3" not in str(report.to_json()), entry


def test_a_revision_at_the_int64_limit_fails_its_document_and_the_run_completes(fast_project: Project, sync_client: Any, cli: Any) -> None:
    """Legacy data through the command line: the run completes (exit 0) with that one document failed, reported
    with the server's code and never with the value or the document the server's message quotes."""
    import json

    people = sync_client[fast_project.db].people
    people.insert_many([{"_id": i, "first": f"F{i}", "__v": 1, "__rev": Int64(2**63 - 1) if i == 9 else 1} for i in range(10)])
    people.create_index([("__v", 1), ("_id", 1)])
    fast_project.add(NAME, background_file(batch_size=100, extra=BUDGET))
    assert cli(fast_project, "up").returncode == 0
    code, out, err = cli(fast_project, "background", "run", NAME.removesuffix(".py"), "--json")
    assert code == 0, err
    (run,) = json.loads(out)["background"]
    assert (run["status"], run["last_error"], run["failed_documents"], run["totals"]["migrated"]) == ("completed", None, 1, 9)
    assert people.count_documents({"__v": 2}) == 9 and people.find_one({"_id": 9}, {"_id": 0, "__v": 1}) == {"__v": 1}
    code, shown, said = cli(fast_project, "background", "status", NAME.removesuffix(".py"), "--json")
    assert code == 0, said
    (report,) = json.loads(shown)["background"]
    assert [(e["reason"], e["code"], e["count"]) for e in report["doc_error_counts"]] == [("write", 2, 1)]
    assert str(2**63 - 1) not in out + err + shown + said  # the value the server's message quotes
