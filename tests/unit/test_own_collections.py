"""mongoshift's own collections (changelog, lock, background state, converge log) are checked
before anything is written to them, so a typo in a setting cannot damage an application collection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mongoshift.api import background, collections as cv, migrations as command
from mongoshift.errors import CollectionClashError, ConfigInvalidError, ExitCode
from mongoshift.project.settings import load_settings

from ..cli.test_cli import QUICK


async def indexes(db, name: str) -> set[str]:  # type: ignore[no-untyped-def]
    return {doc["name"] async for doc in await db[name].list_indexes()}


@pytest.mark.parametrize(
    "setting", ["changelog_collection", "lock_collection", "background_collection", "converge_collection", "run_log_collection"]
)
async def test_a_setting_naming_an_application_collection_is_refused_before_any_write(project, db, setting: str) -> None:  # type: ignore[no-untyped-def]
    await db.users.insert_many([{"name": "a", "email": "a@x"}, {"name": "b", "email": "b@x"}])
    project.add("0001_a.py", QUICK)
    settings = project.settings(**{setting: "users"})
    with pytest.raises(CollectionClashError) as info:
        await command.up(settings)
    assert info.value.exit_code == ExitCode.COLLECTION_CLASH == 39
    assert setting in info.value.message and "'users'" in info.value.message
    assert "a@x" not in info.value.message  # no document value in the output
    assert await indexes(db, "users") == {"_id_"}
    assert await db.users.count_documents({}) == 2
    assert "marks" not in await db.list_collection_names()  # the migration never ran


async def test_background_partitions_of_an_application_collection_are_refused(project, db) -> None:  # type: ignore[no-untyped-def]
    await db.users_partitions.insert_one({"sku": 1})
    settings = project.settings(background_collection="users")
    with pytest.raises(CollectionClashError, match="users_partitions"):
        await background.status(settings)
    assert await indexes(db, "users_partitions") == {"_id_"}
    assert "users" not in await db.list_collection_names()


async def test_converge_log_naming_an_application_collection_is_refused(project, db) -> None:  # type: ignore[no-untyped-def]
    await db.audit.insert_one({"who": "x"})
    settings = project.settings(converge_collection="audit", collections=[{"name": "orders", "indexes": [{"keys": {"a": 1}}]}])
    with pytest.raises(CollectionClashError, match="converge_collection"):
        await cv.converge(settings)
    assert await indexes(db, "audit") == {"_id_"}
    assert "orders" not in await db.list_collection_names()


@pytest.mark.parametrize("setting", ["changelog_collection", "converge_collection"])
async def test_a_setting_naming_a_view_is_refused(project, db, setting: str) -> None:  # type: ignore[no-untyped-def]
    """An empty view passes the sample of foreign documents; its listing says it is a view (as mongod lists it)."""
    await db.create_collection("recent", viewOn="nothing_yet", pipeline=[])
    project.add("0001_a.py", QUICK)
    settings = project.settings(**{setting: "recent"}, collections=[{"name": "orders", "indexes": [{"keys": {"a": 1}}]}])
    with pytest.raises(CollectionClashError, match="which is a view, not a collection"):
        await (command.up(settings) if setting == "changelog_collection" else cv.converge(settings))
    assert "orders" not in await db.list_collection_names() and "marks" not in await db.list_collection_names()


async def test_own_collections_with_own_records_empty_or_missing_are_accepted(project, db) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", QUICK)
    await db.create_collection("empty_log")
    settings = project.settings(changelog_collection="empty_log")
    await command.up(settings)  # an empty collection is fine: it becomes the changelog
    project.add("0002_b.py", QUICK)
    await command.up(settings)  # and on the next run it holds our records
    assert {r.name for r in await command.status(settings)} == {"0001_a.py", "0002_b.py"}
    assert "name_unique" in await indexes(db, "empty_log")


async def test_a_declared_collection_cannot_be_one_of_the_own_collections(project, db) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", QUICK)
    settings = project.settings(lock_collection="orders", collections=[{"name": "orders", "indexes": []}])
    with pytest.raises(CollectionClashError, match="declared"):
        await command.up(settings)
    assert "orders" not in await db.list_collection_names()


def test_declared_collection_in_the_folder_clashing_is_exit_39(project, cli) -> None:  # type: ignore[no-untyped-def]
    folder = project.root / "collections"
    folder.mkdir()
    (folder / "locks.toml").write_text('name = "_mongoshift_locks"\nindexes = []\n')
    result = cli(project, "converge", "--json")
    assert result.returncode == 39, result.stderr
    assert json.loads(result.stdout)["error"]["kind"] == "collection_clash"


def test_cli_exit_code_and_message(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    sync_client[project.db].users.insert_one({"name": "a"})
    project.add("0001_a.py", QUICK)
    project.write_config(changelog_collection="users")
    result = cli(project, "up")
    assert result.returncode == 39, result.stderr
    assert "changelog_collection" in result.stderr and "users" in result.stderr
    assert list(sync_client[project.db].users.index_information()) == ["_id_"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"changelog_collection": "x", "lock_collection": "x"}, "lock_collection"),
        ({"lock_collection": "_mongoshift_converge"}, "converge_collection"),
        ({"background_collection": "_mongoshift_migrations"}, "background_collection"),
        ({"background_collection": "jobs", "lock_collection": "jobs_partitions"}, "jobs_partitions"),
        ({"background_collection": "jobs", "converge_collection": "jobs_partitions"}, "jobs_partitions"),
    ],
)
def test_two_settings_naming_the_same_collection_are_refused(tmp_path: Path, values: dict[str, str], message: str) -> None:
    text = "[mongoshift]\n" + "".join(f'{k} = "{v}"\n' for k, v in values.items())
    (tmp_path / "mongoshift.toml").write_text(text)
    with pytest.raises(ConfigInvalidError) as info:
        load_settings({}, environ={}, cwd=tmp_path)
    assert info.value.exit_code == 6
    assert message in info.value.message and "mongoshift.toml" in info.value.message


@pytest.mark.parametrize(
    "setting", ["changelog_collection", "lock_collection", "background_collection", "converge_collection", "run_log_collection"]
)
def test_system_collection_names_are_refused(tmp_path: Path, setting: str) -> None:
    (tmp_path / "mongoshift.toml").write_text(f'[mongoshift]\n{setting} = "system.js"\n')
    with pytest.raises(ConfigInvalidError, match=setting) as info:
        load_settings({}, environ={}, cwd=tmp_path)
    assert info.value.exit_code == 6


@pytest.mark.parametrize(
    "record",
    [{"name": 5, "status": "applied", "batch": 1}, {"name": "0001_a.py", "status": "done", "batch": 1}],
    ids=["name not text", "unknown status"],
)
async def test_a_hand_edited_record_is_not_answered_with_empty_the_collection(project, db, record: dict) -> None:  # type: ignore[no-untyped-def, type-arg]
    """A changelog record with mongoshift's fields but a value it never writes (edited by hand) was refused as
    foreign documents, "one has the fields: batch, name, status ... empty the collection if it really is meant
    for mongoshift": advice that throws the whole history away for one bad record. It is named as a record of
    ours with a wrong value, to restore or delete alone."""
    await db["_mongoshift_migrations"].insert_many([{"name": "0002_b.py", "status": "applied", "batch": 1}, record])
    project.add("0001_a.py", QUICK)
    with pytest.raises(CollectionClashError) as info:
        await command.status(project.settings())
    message = info.value.message
    assert info.value.exit_code == 39
    assert "empty the collection" not in message, message
    assert "changelog records" in message and "restore it, or delete that record" in message, message
    assert "done" not in message.replace("nothing was written", "")  # never the value itself
