"""A transactional batch's write (strict mode) sends its updates without the BSON check, and still fails
a result that cannot be stored alone, with the very error the check gives (issue 27, eighth pass)."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo.errors import PyMongoError

from mongoshift.background.write import batch
from mongoshift.background.write.batch import BatchResult, DocumentError, DocumentFailed, apply_batch
from mongoshift.background.write.job import Job
from mongoshift.project.run import CancelSignal
from mongoshift.schema.background import Background

from .conftest import seed

SECRET = "secret-value-4242"


class Opaque:
    def __repr__(self) -> str:
        return SECRET


#: Values that make document 3's update unstorable: the encoder refuses the first four, the fifth is too large.
BAD = {
    "a set": lambda: {SECRET},
    "an arbitrary object": Opaque,
    "an int beyond int64": lambda: 2**64 + 4242,
    "a set inside a list": lambda: [{"x": [{SECRET}]}],
    "a document over 16 MiB": lambda: SECRET * (17 * 1024 * 1024 // len(SECRET)),
}


def _job(bad: Any = None) -> Job:
    def migrate(doc: dict[str, Any], ctx: Any) -> dict[str, Any]:
        doc["full_name"] = doc.pop("first") + " " + doc.pop("last")
        if bad is not None and doc["_id"] == 3:
            doc["bad"] = bad()
        return doc

    spec = Background(collection="people", from_version=1, to_version=2, migrate=migrate, transaction=True)
    return Job("0001_strict.py", spec, "forward", 1, 1, 2, migrate, None, None, [])


async def _strict(client: Any, db: Any, job: Job) -> BatchResult | DocumentError:
    """One strict write of the whole collection in a transaction: committed, or aborted on its document's failure."""
    async with client.start_session() as session:
        await session.start_transaction()
        docs = await db.people.find({}, sort=[("_id", 1)], session=session).to_list(None)
        try:
            result = await apply_batch(job, docs, db.people, job.context("0", CancelSignal(), session=session), session=session, strict=True)
        except DocumentFailed as failed:
            await session.abort_transaction()
            return failed.document
        await session.commit_transaction()
        return result


def _count_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    check = batch.bson_problems

    def counted(updates: Any, *args: Any) -> dict[int, str]:
        calls.append(len(updates))
        return check(updates, *args)

    monkeypatch.setattr(batch, "bson_problems", counted)
    return calls


async def test_a_strict_write_sends_its_updates_unchecked_and_a_plain_one_checks_them(client, db, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 6)
    calls = _count_checks(monkeypatch)
    result = await _strict(client, db, _job())
    assert isinstance(result, BatchResult) and result.migrated == 6 and not result.errors
    assert calls == []  # no encode of the updates before the write
    assert await db.people.count_documents({"__v": 2, "full_name": {"$exists": True}}) == 6

    await db.people.drop()
    await seed(db.people, 6)
    plain = await apply_batch(_job(), await db.people.find({}, sort=[("_id", 1)]).to_list(None), db.people, _job().context("0", CancelSignal()))
    assert plain.migrated == 6 and calls == [6]


@pytest.mark.parametrize("bad", list(BAD))
async def test_an_unstorable_result_fails_a_strict_write_as_the_check_fails_it(client, db, bad: str) -> None:  # type: ignore[no-untyped-def]
    """The document failed, its reason and words are the check's (a plain write's error), and nothing is written."""
    await seed(db.people, 6)
    plain = await apply_batch(_job(BAD[bad]), await db.people.find({}, sort=[("_id", 1)]).to_list(None), db.people, _job().context("0", CancelSignal()))
    assert plain.migrated == 5 and len(plain.errors) == 1 and plain.errors[0].reason == "shape"

    await db.people.drop()
    await seed(db.people, 6)
    failed = await _strict(client, db, _job(BAD[bad]))
    assert failed == plain.errors[0]
    assert SECRET not in failed.error and "4242" not in failed.error
    assert await db.people.count_documents({"__v": 2}) == 0  # what the bulk wrote went with the transaction


async def test_a_strict_write_that_fails_for_another_reason_raises_that_error(client, db, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A failed write whose updates all pass the check is not a document's failure: its error goes up as it was."""
    await seed(db.people, 3)

    class Refused(PyMongoError):
        pass

    async def refuse(*args: Any, **kwargs: Any) -> Any:
        raise Refused("refused")

    monkeypatch.setattr(batch, "_write", refuse)
    with pytest.raises(Refused):
        await _strict(client, db, _job())
