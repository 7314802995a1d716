"""A transform result that cannot be stored as BSON fails its own document only, and says so without values."""

from __future__ import annotations

import pytest

from mongoshift.api import background as bg, migrations as command

from .conftest import seed

SECRET = "secret-value-4242"

#: Expressions (with ``doc`` and ``SECRET`` in scope) that make one document's result unstorable.
BAD_RESULTS = {
    "a set": "doc['tags'] = {SECRET}",
    "an arbitrary object": "doc['obj'] = Opaque()",
    "a date without a time": "doc['day'] = datetime.date(2026, 1, 2)",
    "a Python Decimal": "doc['price'] = decimal.Decimal('4242.4242')",
    "an int beyond int64": "doc['n'] = 2**64 + 4242",
    "a nested key with NUL": "doc['sub'] = {'a\\x00' + SECRET: 1}",
    "a nested key starting with $": "doc['sub'] = {'$' + SECRET: 1}",
    "a top-level key starting with $": "doc['$' + SECRET] = 1",
    "a nested set inside a list": "doc['deep'] = [{'x': [{SECRET}]}]",
    "a document over 16 MiB": "doc['blob'] = SECRET * (17 * 1024 * 1024 // len(SECRET))",
}

HEADER = f'''
import datetime, decimal
from mongoshift import Background

SECRET = {SECRET!r}


class Opaque:
    def __repr__(self):
        return SECRET
'''


def _one_doc_file(bad: str, *, mode: str = "migrate", extra: str = "") -> str:
    if mode == "migrate_batch":
        body = f'''
def migrate_batch(docs, ctx):
    out = []
    for doc in docs:
        if doc["_id"] == 7:
            {bad}
        doc["full_name"] = doc.pop("first") + " " + doc.pop("last")
        out.append(doc)
    return out
'''
    else:
        body = f'''
def migrate(doc, ctx):
    if doc["_id"] == 7:
        {bad}
    doc["full_name"] = doc.pop("first") + " " + doc.pop("last")
    return doc
'''
    return HEADER + body + f'''
background = Background(collection="people", from_version=1, to_version=2, {mode}={mode}, batch_size=50, pause_ms=0,
                        max_document_errors=1, adaptive=False, {extra})
'''


async def _run(fast_project, db, source: str):  # type: ignore[no-untyped-def]
    await seed(db.people, 50)
    fast_project.add("0001_names.py", source)
    s = fast_project.settings()
    await command.up(s)
    (result,) = await bg.run(s, ["0001_names.py"])
    return result


def _assert_only_the_bad_one_failed(result, migrated: int = 49) -> None:  # type: ignore[no-untyped-def]
    assert result.status == "completed", result.last_error
    assert result.totals["migrated"] == migrated and result.failed_documents == 1
    error = result.doc_errors[-1]
    assert error["reason"] == "shape"
    assert SECRET not in error["error"] and "4242" not in error["error"]


@pytest.mark.parametrize("bad", list(BAD_RESULTS.values()), ids=list(BAD_RESULTS))
async def test_an_unencodable_result_fails_only_its_document(fast_project, db, bad: str) -> None:  # type: ignore[no-untyped-def]
    result = await _run(fast_project, db, _one_doc_file(bad))
    _assert_only_the_bad_one_failed(result)
    assert await db.people.count_documents({"__v": 2, "full_name": {"$exists": True}}) == 49
    untouched = await db.people.find_one({"_id": 7})
    assert untouched["__v"] == 1 and untouched["first"] == "F7"


@pytest.mark.parametrize("bad", ["a set", "an int beyond int64", "a document over 16 MiB"])
async def test_an_unencodable_result_of_migrate_batch_fails_only_its_document(fast_project, db, bad: str) -> None:  # type: ignore[no-untyped-def]
    result = await _run(fast_project, db, _one_doc_file(BAD_RESULTS[bad], mode="migrate_batch"))
    _assert_only_the_bad_one_failed(result)


@pytest.mark.parametrize("bad", ["a set", "an arbitrary object", "an int beyond int64", "a document over 16 MiB"])
async def test_an_unencodable_result_in_a_transaction_fails_only_its_document(fast_project, db, bad: str) -> None:  # type: ignore[no-untyped-def]
    result = await _run(fast_project, db, _one_doc_file(BAD_RESULTS[bad], extra="transaction=True,"))
    _assert_only_the_bad_one_failed(result)
    assert await db.people.count_documents({"__v": 2}) == 49


@pytest.mark.real_mongodb
@pytest.mark.parametrize("extra", ["", "transaction=True,"])
async def test_a_result_that_grows_the_stored_document_past_16_mib_fails_only_its_document(fast_project, db, extra: str) -> None:  # type: ignore[no-untyped-def]
    """The update itself fits; the document it makes on the server does not (17419)."""
    await seed(db.people, 50)
    await db.people.update_one({"_id": 7}, {"$set": {"big": "x" * (10 * 1024 * 1024)}})
    source = _one_doc_file("doc['big2'] = 'y' * (10 * 1024 * 1024)", extra=extra)
    fast_project.add("0001_names.py", source)
    s = fast_project.settings()
    await command.up(s)
    (result,) = await bg.run(s, ["0001_names.py"])
    assert result.status == "completed" and result.totals["migrated"] == 49 and result.failed_documents == 1


async def test_an_unencodable_step_checkpoint_fails_with_a_message_without_values(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    fast_project.add(
        "0001_step.py",
        HEADER
        + """
def step(ctx):
    return {"checkpoint": {"seen": {SECRET}}, "done": False}

background = Background(collection="people", from_version=0, to_version=1, step=step, pause_ms=0, max_slice_failures=1)
""",
    )
    s = fast_project.settings()
    await command.up(s)
    (result,) = await bg.run(s, ["0001_step.py"])
    assert result.status == "failed"
    assert "checkpoint" in (result.last_error or "") and "BSON" in (result.last_error or "")
    assert SECRET not in (result.last_error or "")
