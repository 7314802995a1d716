"""What converge reports when something fails or the run is stopped: each action once, with its reason."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from pymongo.errors import OperationFailure, PyMongoError

from mongoshift.api import collections as cv
from mongoshift.converge.applier import Applier
from mongoshift.errors import ConvergeFailedError, RunAbortedError
from mongoshift.project.redaction import describe_error
from mongoshift.project.run import CancelSignal

from .conftest import server_indexes, settings_with
from .test_cli import declare


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (OperationFailure("boom"), "OperationFailure: boom"),
        (OperationFailure("", code=None), "OperationFailure"),
        (OperationFailure("bad index", code=67), "OperationFailure: 67: bad index"),
        (
            OperationFailure("dup", code=11000, details={"codeName": "DuplicateKey", "errmsg": "E11000 dup"}),
            "OperationFailure: duplicate key on a unique index (11000)",
        ),
        (OperationFailure("x", code=None, details={"codeName": "Weird"}), "OperationFailure: Weird: x"),
        (OperationFailure("x", code=None, details={"errmsg": None}), "OperationFailure: x"),
        (PyMongoError(), "PyMongoError"),
        (RuntimeError(), "RuntimeError"),
        (ValueError("a value"), "ValueError: a value"),
    ],
)
def test_describe_error_never_says_none(error: BaseException, expected: str) -> None:
    text = describe_error(error)
    assert text == expected
    assert "None" not in text


def test_describe_error_strips_credentials() -> None:
    text = describe_error(OperationFailure("cannot reach mongodb://user:secret@host/db", code=6))
    assert "secret" not in text


async def test_a_failed_index_batch_lists_each_index_once_with_the_reason(project, db) -> None:  # type: ignore[no-untyped-def]
    await db.users.insert_many([{"b": 1}, {"b": 1}])  # the unique b_1 fails the one createIndexes of the batch
    s = settings_with(project, {"name": "users", "indexes": [{"keys": {"a": 1}}, {"keys": {"b": 1}, "unique": True}, {"keys": {"c": 1}}]})
    with pytest.raises(ConvergeFailedError) as info:
        await cv.converge(s)
    rows = [r for r in info.value.details["converge"]["actions"] if r["target"] == "index"]
    assert Counter(r["name"] for r in rows) == {"a_1": 1, "b_1": 1, "c_1": 1}
    assert all(r["status"] == "failed" and "duplicate key" in r["error"] and "(index b_1, 11000)" in r["error"] for r in rows), rows
    assert "11000" in info.value.message and "None" not in info.value.message
    message = info.value.message
    assert "a_1, b_1, c_1" in message and "remove the duplicates" in message, message  # the whole batch, and what to do
    assert all("remove the duplicates" in r["error"] for r in rows)


async def test_a_unique_rebuild_over_duplicates_names_its_index_and_says_what_to_do(project, db) -> None:  # type: ignore[no-untyped-def]
    """docs/converge.md's own declaration on legacy data: a plain by_email, two addresses equal under its collation.

    The rebuild's error said only ``duplicate key on email (11000)``: the collation the server quotes between the
    index's name and ``dup key`` hid the name, and a rebuild gave no remedy where the same failed create did."""
    await db.users.create_index("email", name="by_email")
    await db.users.insert_many([{"email": "dup-Value@x.io"}, {"email": "DUP-value@x.io"}])
    declared = {"keys": {"email": 1}, "name": "by_email", "unique": True, "collation": {"locale": "en", "strength": 2}}
    s = settings_with(project, {"name": "users", "indexes": [declared]})
    with pytest.raises(ConvergeFailedError) as info:
        await cv.converge(s, confirm=True)
    [row] = [r for r in info.value.details["converge"]["actions"] if r["name"] == "by_email"]
    assert (row["action"], row["status"]) == ("rebuild", "failed"), row
    assert row["error"].startswith("DuplicateKeyError: duplicate key on email (index by_email, 11000); remove the duplicates"), row["error"]
    assert row["error"].endswith("the old index 'by_email' was restored") and "value" not in row["error"].lower()
    assert "unique" not in {k: v for k, v in (await server_indexes(db, "users"))["by_email"].items() if v}


def test_cli_lists_a_failed_batch_once_in_json_and_in_the_table(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    declare(project, '[[mongoshift.collections]]\nname = "users"\nindexes = [{ keys = { a = 1 } }, { keys = { b = 1 }, unique = true }]\n')
    # Duplicates under the declared unique index: the one createIndexes of the batch fails.
    sync_client[project.db].users.insert_many([{"b": "dup-value-7f3a"}, {"b": "dup-value-7f3a"}])
    result = cli(project, "converge", "--json")
    assert result.returncode == 27, result.stderr
    rows = [r for r in json.loads(result.stdout)["error"]["details"]["converge"]["actions"] if r["target"] == "index"]
    assert sorted(r["name"] for r in rows) == ["a_1", "b_1"]
    assert all(r["status"] == "failed" and "11000" in r["error"] for r in rows), rows
    result = cli(project, "converge")
    assert result.returncode == 27
    rows = [line.split("\t")[:6] for line in result.stdout.splitlines() if line.startswith("users\tindex\t")]
    assert sorted(r[2] for r in rows) == ["a_1", "b_1"], result.stdout
    # the status alone in its column, why in the note (the whole error sat in the status column)
    assert all(r[4] == "failed" and "(index b_1, 11000)" in r[5] for r in rows), rows
    assert "dup-value-7f3a" not in result.stdout + result.stderr  # the key value is never shown


async def test_a_stop_while_the_declared_collections_are_read_ends_the_read(project, db, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Ctrl-C while converge read 300 collections said "stopping" and read on to the end; a dry run or check then
    exited 0. The stop is checked before each collection is read: nothing more is read, nothing written (11)."""
    from mongoshift.converge import inspection

    s = settings_with(project, *({"name": f"c{i}", "indexes": [{"keys": {"a": 1}}]} for i in range(3)))
    cancel = CancelSignal()
    real, read = inspection._state, []

    async def read_then_stop(db, declaration, info, **kwargs):  # type: ignore[no-untyped-def]
        read.append(declaration.name)
        cancel.set("Ctrl-C")  # arrives while the first collection is read
        return await real(db, declaration, info, **kwargs)

    monkeypatch.setattr(inspection, "_state", read_then_stop)
    with pytest.raises(RunAbortedError) as info:
        await cv.converge(s, confirm=True, cancel=cancel)
    assert "while reading the declared collections; nothing was written" in info.value.message
    assert read == ["c0"] and "c0" not in await db.list_collection_names()


async def test_a_stop_during_the_last_step_still_ends_the_run_as_stopped(project, db, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Ctrl-C while the last createIndexes ran: the step finishes, and the run is stopped (11), as `up` is, not a success."""
    s = settings_with(project, {"name": "users", "indexes": [{"keys": {"a": 1}}]})
    cancel = CancelSignal()
    real = Applier._create_indexes

    async def create_then_stop(self, collection, creates):  # type: ignore[no-untyped-def]
        results = await real(self, collection, creates)
        cancel.set("Ctrl-C")  # arrives while the last step is running
        return results

    monkeypatch.setattr(Applier, "_create_indexes", create_then_stop)
    with pytest.raises(RunAbortedError) as info:
        await cv.converge(s, confirm=True, cancel=cancel)
    assert "during its last step, which ran to its end" in info.value.message
    assert "a_1" in await server_indexes(db, "users")
    body = info.value.details["converge"]
    assert body["success"] is False and body["changed"] is True
    assert [(r["name"], r["status"]) for r in body["actions"] if r["action"] == "create"] == [(None, "applied"), ("a_1", "applied")]
    [logged] = [doc async for doc in db["_mongoshift_converge"].find()]
    assert logged["success"] is False and "during its last step" in logged["error"]


async def test_converge_checks_the_stop_signal_between_steps(project, db, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    await db.users.create_index("old", name="old_1")
    s = settings_with(project, {"name": "users", "indexes": [{"keys": {"a": 1}}], "prune": True})
    cancel = CancelSignal()
    real = Applier._create_indexes

    async def create_then_stop(self, collection, creates):  # type: ignore[no-untyped-def]
        results = await real(self, collection, creates)
        cancel.set("Ctrl-C")  # arrives while the batch is running
        return results

    monkeypatch.setattr(Applier, "_create_indexes", create_then_stop)
    with pytest.raises(RunAbortedError) as info:
        await cv.converge(s, confirm=True, prune=True, cancel=cancel)
    indexes = await server_indexes(db, "users")
    assert "a_1" in indexes and "old_1" in indexes  # the drop after the create never ran
    rows = {(r["name"], r["action"]): r for r in info.value.details["converge"]["actions"]}
    assert rows[("a_1", "create")]["status"] == "applied"
    assert rows[("old_1", "drop")]["status"] == "skipped"
    # the stop's own words, once (it read "converge stopped before this step (converge stopped (Ctrl-C); ...)")
    assert rows[("old_1", "drop")]["error"] == "converge stopped (Ctrl-C); the steps after it were skipped"
