"""The live watcher on a transactional migration: more documents than one transaction takes.

The watcher upgrades a burst of events in several transactions (``batch_size=2``), each reading
the documents still pending and still in the old shape. Every document is upgraded once, its side
write committed once. (Ruff's B023 pointed at the closures of that loop in issue 25: they were
awaited within their own iteration, so no bug; they are now defined once, outside the loop.)
Waits poll the database with a generous bound: nothing here asserts a duration.
"""

from __future__ import annotations

from typing import Any

from mongoshift.api import background as bg, migrations as command

from .test_transaction import txn_file
from .test_watcher import Running, old_doc, until

NAME = "0001_txn.py"


async def test_a_batch_of_events_larger_than_a_transaction_is_upgraded_in_several_each_document_once(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await db.people.insert_one(old_doc("seed"))
    fast_project.add(NAME, txn_file(extra="batch_size=2"))
    s = fast_project.settings()
    await command.up(s)
    assert [r.status for r in await bg.run(s, [NAME])] == ["completed"]
    await db.audit.delete_many({})
    ids = [f"late-{i}" for i in range(7)]
    watcher = Running(s)
    try:
        await watcher.reached("streaming")
        await db.people.insert_many([old_doc(i) for i in ids])  # one burst: one batch of events

        async def all_upgraded() -> bool:
            return await db.people.count_documents({"_id": {"$in": ids}, "__v": 2}) == len(ids)

        await until("every late document upgraded", all_upgraded)
    finally:
        await watcher.stop()
    docs: list[dict[str, Any]] = await db.people.find({"_id": {"$in": ids}}).to_list(None)
    assert {d["_id"]: (d["full_name"], d["__rev"]) for d in docs} == {i: ("old app", 2) for i in ids}
    audit = await db.audit.find({}, {"_id": 0, "order": 1}).to_list(None)
    assert sorted(a["order"] for a in audit) == sorted(ids)  # each side write committed once, with its document
