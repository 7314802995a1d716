"""A migration that gives up after ``max_passes`` says what was left and why, without ids."""

from __future__ import annotations

from mongoshift.api import background as bg, migrations as command
from mongoshift.background.plan import planner

from .conftest import background_file

APP = "import pymongo\n_c = {}\n"


def _with_app(project, source: str) -> str:  # type: ignore[no-untyped-def]
    return source.replace(
        "from mongoshift import Background", f"from mongoshift import Background\nURI = {project.uri!r}\nDB = {project.db!r}"
    )


async def test_documents_no_partition_reads_are_reported_as_unread_not_as_an_old_writer(fast_project, db, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A gap in the planner (simulated: strings left out) must not be blamed on the application."""
    monkeypatch.setattr(planner, "BRACKETS", tuple(b for b in planner.BRACKETS if b != "string"))
    await db.people.insert_many(
        [{"_id": i, "first": "a", "last": "b", "__v": 1, "__rev": 1} for i in [1, 2, 3, "secret-id-a", "secret-id-b"]]
    )
    fast_project.add("0001_names.py", background_file(batch_size=10, extra="max_passes=2,"))
    s = fast_project.settings()
    await command.up(s)
    (result,) = await bg.run(s, ["0001_names.py"])
    message = result.last_error or ""
    assert result.status == "failed" and result.pass_number == 2
    assert "2 documents" in message and "after 2 passes" in message
    assert "no partition covers 2" in message.lower() and "old version of the application" not in message
    assert "string" in message  # the _id type, so the cause can be found
    assert "secret-id" not in message


async def test_documents_the_application_keeps_changing_fail_with_a_conflict_message(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await db.people.insert_many([{"_id": f"secret-id-{i}", "first": "a", "last": "b", "__v": 1, "__rev": 1} for i in range(4)])
    source = background_file(batch_size=10, extra="max_passes=2, max_conflict_retries=0,").replace(
        "def migrate(doc, ctx):",
        APP + "def migrate(doc, ctx):\n"
        "    _c.setdefault('c', pymongo.MongoClient(URI))\n"
        "    _c['c'][DB].people.update_one({'_id': doc['_id']}, {'$inc': {'__rev': 1}})\n",
    )
    fast_project.add("0001_names.py", _with_app(fast_project, source))
    s = fast_project.settings()
    await command.up(s)
    (result,) = await bg.run(s, ["0001_names.py"])
    message = result.last_error or ""
    assert result.status == "failed" and result.pass_number == 2
    assert "4 documents" in message
    assert "4 write conflicts" in message and "max_conflict_retries" in message
    assert "secret-id" not in message


async def test_an_old_writer_is_named_with_what_the_last_pass_did(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await db.people.insert_many([{"_id": i, "first": "a", "last": "b", "__v": 1, "__rev": 1} for i in range(5)])
    source = background_file(batch_size=100, extra="max_passes=2,").replace(
        "def migrate(doc, ctx):",
        APP + "import itertools\n_n = itertools.count(100_000)\ndef migrate(doc, ctx):\n"
        "    _c.setdefault('c', pymongo.MongoClient(URI))\n"
        "    _c['c'][DB].people.insert_one({'_id': next(_n), 'first': 'old', 'last': 'app', '__v': 1, '__rev': 1})\n",
    )
    fast_project.add("0001_names.py", _with_app(fast_project, source))
    s = fast_project.settings()
    await command.up(s)
    (result,) = await bg.run(s, ["0001_names.py"])
    message = result.last_error or ""
    assert result.status == "failed"
    assert "old version of the application" in message
    assert "the last pass read 5, rewrote 5" in message.lower()  # pass 2 rewrote the 5 written during pass 1
