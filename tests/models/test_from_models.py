"""``create --from-models``: a model's shape change written as a background migration that runs and rolls back (issue 30, items 3 and 6)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from bson import Decimal128, Int64

from mongoshift.api import background as bg, migrations as command

from ..conftest import Project
from .conftest import PACKAGE, write_models

BEFORE = '''
from typing import Optional

from beanie import Document


class Member(Document):
    fullname: str
    age: str
    legacy: Optional[str] = None

    class Settings:
        name = "members"
'''

AFTER = '''
from typing import Optional

from beanie import Document
from pydantic import Field


class Member(Document):
    full_name: str = Field(json_schema_extra={"renamed_from": "fullname"})
    age: int
    status: str = "active"
    legacy: Optional[str] = None
    nickname: Optional[str] = None

    class Settings:
        name = "members"
'''


async def seed(db: Any, n: int = 25) -> None:
    await db.members.insert_many([{"_id": i, "fullname": f"Person {i}", "age": str(20 + i), "legacy": f"l{i}"} for i in range(n)])


def text(path: str) -> str:
    """A small file the test reads (a plain function: nothing else runs on the loop meanwhile)."""
    return Path(path).read_text(encoding="utf-8")


def fast(project: Project) -> None:
    project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.2)


def created_from(project: Project, cli, before: str, after: str, name: str) -> str:  # type: ignore[no-untyped-def]
    """The one file ``create NAME --from-models`` writes when the models go from ``before`` (generated) to ``after``."""
    write_models(project, before)
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    write_models(project, after)
    result = cli(project, "--json", "create", name, "--from-models")
    assert result.returncode == 0, result.stderr
    (path,) = json.loads(result.stdout)["files"]
    return str(path)


async def test_add_rename_and_type_change_run_to_completion_and_roll_back(project: Project, cli, db) -> None:  # type: ignore[no-untyped-def]
    fast(project)
    await seed(db)
    write_models(project, BEFORE)
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    write_models(project, AFTER)
    result = cli(project, "--json", "create", "member_shape", "--from-models")
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    (change,) = body["collections"]
    assert change["changes"] == ["renamed 'fullname' to 'full_name'", "added 'status' with default 'active'", "'age' from string to int"]
    assert (change["from_version"], change["to_version"], change["reversible"]) == (0, 1, True)
    assert change["notes"] == ["added 'nickname' (optional, no value to set)"]
    (path,) = body["files"]
    source = text(path)
    assert "MEMBERS = define_shapes(1, {0: upgrade})" in source and "revert=revert," in source
    snapshot = json.loads((project.root / "collections" / "_models.json").read_text(encoding="utf-8"))
    assert snapshot["shapes"]["members"]["version"] == 1 and "full_name" in snapshot["shapes"]["members"]["fields"]

    s = project.settings()
    name = path.rsplit("/", 1)[-1]
    await command.up(s)
    (done,) = await bg.run(s, [name])
    assert done.status == "completed"
    assert await db.members.count_documents({"__v": 1}) == 25
    doc = await db.members.find_one({"_id": 3}, {"__rev": 0})
    assert doc == {"_id": 3, "full_name": "Person 3", "age": 23, "status": "active", "legacy": "l3", "__v": 1}

    assert (await command.down(s)).results[0].reason == "revert registered"
    (reverted,) = await bg.run(s, [name])
    assert reverted.status == "completed" and reverted.direction == "revert"
    doc = await db.members.find_one({"_id": 3}, {"__rev": 0, "__v": 0})
    assert doc == {"_id": 3, "fullname": "Person 3", "age": "23", "legacy": "l3"}
    assert await db.members.count_documents({"fullname": {"$exists": True}, "status": {"$exists": False}}) == 25

    again = cli(project, "create", "nothing", "--from-models")
    assert again.returncode == 0 and "no data-shape change since the models snapshot" in again.stdout
    write_models(project, AFTER.replace("    nickname: Optional[str] = None\n", "    nickname: Optional[str] = None\n    motto: Optional[str] = None\n"))
    noted = cli(project, "create", "optional_only", "--from-models")
    assert noted.returncode == 0 and "added 'motto' (optional, no value to set)" in noted.stdout
    # the line after a note does not say there was no change (it contradicted the note)
    assert "no stored document needs rewriting" in noted.stdout and "no data-shape change" not in noted.stdout


async def test_a_rename_onto_a_field_the_document_already_holds_fails_that_document(project: Project, cli, db) -> None:  # type: ignore[no-untyped-def]
    """A legacy document with both the old and the new field (the application wrote the new one early): the rename
    overwrote the new field's value with the old one, which was lost without a word. It now fails that document (a
    different value) or keeps the one (the same value), never showing the values."""
    fast(project)
    await db.members.insert_many([
        {"_id": 1, "fullname": "Old", "full_name": "Kept", "age": "30"},
        {"_id": 2, "fullname": "Same", "full_name": "Same", "age": "31"},
        {"_id": 3, "fullname": "Plain", "age": "32"},
    ])
    path = created_from(project, cli, BEFORE, AFTER, "member_shape")
    s = project.settings()
    name = path.rsplit("/", 1)[-1]
    await command.up(s)
    (done,) = await bg.run(s, [name])
    assert done.status == "failed"
    assert await db.members.find_one({"_id": 1}) == {"_id": 1, "fullname": "Old", "full_name": "Kept", "age": "30"}
    assert await db.members.find_one({"_id": 2}, {"__rev": 0}) == {"_id": 2, "full_name": "Same", "age": 31, "status": "active", "__v": 1}
    assert (await db.members.find_one({"_id": 3}, {"__rev": 0}))["full_name"] == "Plain"
    status = cli(project, "--json", "background", "status", name)
    (error,) = json.loads(status.stdout)["background"][0]["doc_errors"]
    assert error["error"] == (
        "field fullname: renamed to full_name, which the document already holds with another value (the values are not shown)"
    )
    assert "Old" not in status.stdout and "Kept" not in status.stdout


def test_the_revert_of_a_rename_fails_a_document_that_already_holds_the_old_field(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    """The way back moves the new field onto the old name: a document the application gave the old field again (with
    another value) fails there too, rather than losing one of them; one with the same value goes back."""
    import runpy

    generated = runpy.run_path(created_from(project, cli, BEFORE, AFTER, "member_shape"))
    revert = generated["background"].revert
    with pytest.raises(ValueError) as refused:
        revert({"_id": 1, "full_name": "New", "fullname": "Again", "age": 30, "status": "active", "__v": 1}, None)
    assert str(refused.value) == (
        "field full_name: renamed to fullname, which the document already holds with another value (the values are not shown)"
    )
    back = revert({"_id": 2, "full_name": "Same", "fullname": "Same", "age": 31, "status": "active", "__v": 1}, None)
    assert back["fullname"] == "Same" and "full_name" not in back


async def test_a_removed_field_is_a_one_way_migration(project: Project, cli, db) -> None:  # type: ignore[no-untyped-def]
    fast(project)
    await seed(db, 10)
    path = created_from(project, cli, BEFORE, BEFORE.replace("    legacy: Optional[str] = None\n", ""), "drop_legacy")
    source = text(path)
    assert "revert=" not in source and "# one-way: 'legacy' was removed: its values are gone" in source
    s = project.settings()
    await command.up(s)
    (done,) = await bg.run(s, [path.rsplit("/", 1)[-1]])
    assert done.status == "completed"
    assert await db.members.count_documents({"legacy": {"$exists": True}}) == 0
    assert await db.members.count_documents({"__v": 1, "fullname": {"$exists": True}}) == 10
    down = cli(project, "down")
    assert down.returncode == 13  # irreversible: the values are gone


async def test_what_cannot_be_written_faithfully_is_refused_with_nothing_written(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    write_models(project, BEFORE)
    result = cli(project, "create", "early", "--from-models", "--models", f"{PACKAGE}.models")
    assert result.returncode == 49 and "no models snapshot" in result.stderr
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    snapshot = (project.root / "collections" / "_models.json").read_text(encoding="utf-8")

    write_models(project, BEFORE.replace("    age: str\n", "    age: str\n    email: str\n"))
    result = cli(project, "create", "add_email", "--from-models")
    assert result.returncode == 49
    assert "field 'email' is added as required with no default: the migration cannot fill it" in result.stderr

    write_models(project, BEFORE.replace("    age: str\n", "    age: list[int]\n"))
    result = cli(project, "create", "ages", "--from-models")
    assert result.returncode == 49 and "field 'age' changed from string to array, and no converter is known" in result.stderr

    assert list(project.migrations.iterdir()) == []
    assert (project.root / "collections" / "_models.json").read_text(encoding="utf-8") == snapshot
    result = cli(project, "create", "x", "--from-models", "--background")
    assert result.returncode == 6 and "--from-models cannot be combined" in result.stderr


async def test_the_python_api(project: Project, cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import mongoshift
    from mongoshift import api

    write_models(project, BEFORE)
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    write_models(project, AFTER)
    monkeypatch.chdir(project.root)
    async with mongoshift.api.connect(project.settings()) as ms:
        report = await ms.create_from_models("member_shape")
    assert [p.name.split("_", 1)[1] for p in report.files] == ["member_shape.py"]
    write_models(project, AFTER.replace('    status: str = "active"\n', '    status: str = "active"\n    score: float = 0.5\n'))
    report = await api.create_from_models(project.settings(), "scores")
    assert [c.to_json()["changes"] for c in report.plan.changes] == [["added 'score' with default 0.5"]]
    assert report.plan.changes[0].from_version == 1


async def test_a_session_sees_the_migration_it_created_from_the_models(project: Project, cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The session reads the migrations folder once: the file its own ``create_from_models`` wrote was not pending
    for its next ``plan`` / ``up`` (stop 56, h5)."""
    import mongoshift

    write_models(project, BEFORE)
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    write_models(project, AFTER)
    monkeypatch.chdir(project.root)
    async with mongoshift.api.connect(project.settings()) as ms:
        assert (await ms.plan("up")).rows == []  # the folder is read (and kept) now
        report = await ms.create_from_models("member_shape")
        assert [row.name for row in (await ms.plan("up")).rows] == [p.name for p in report.files]


def with_orders(collection: str) -> str:
    """The members' models and an ``Order`` model stored in ``collection``: two collections for one run."""
    return BEFORE + f'''

class Order(Document):
    total: str

    class Settings:
        name = "{collection}"
'''


async def test_several_changed_collections_get_one_file_each_or_none_at_all(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    two = with_orders("orders")
    write_models(project, two)
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    changed = two.replace("    total: str\n", "    total: float\n").replace("    legacy: Optional[str] = None\n", "")
    write_models(project, changed)
    snapshot = project.root / "collections" / "_models.json"
    before = snapshot.read_text(encoding="utf-8")
    blocker = project.root / "collections" / "._models.json.tmp"
    blocker.mkdir()  # where the new snapshot is written first: it cannot be (even by root), so the run must undo its files
    result = cli(project, "create", "split", "--from-models")
    blocker.rmdir()
    assert result.returncode == 44 and "cannot write the models snapshot" in result.stderr
    assert list(project.migrations.iterdir()) == [] and snapshot.read_text(encoding="utf-8") == before
    result = cli(project, "--json", "create", "split", "--from-models")
    names = sorted(Path(p).name.split("_", 1)[1] for p in json.loads(result.stdout)["files"])
    assert names == ["split_members.py", "split_orders.py"]


def test_collections_whose_names_a_file_name_cannot_hold_get_their_files(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    """``NAME_<collection>`` with a collection named ``orders.v2`` was an invalid migration name: exit 19 after the
    models were read, and no migration for either collection. The collection's name is reduced to what a file name holds."""
    two = with_orders("orders.v2")
    write_models(project, two)
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    write_models(project, two.replace("    total: str\n", "    total: float\n").replace("    legacy: Optional[str] = None\n", ""))
    result = cli(project, "--json", "create", "split", "--from-models")
    assert result.returncode == 0, result.stdout + result.stderr
    names = sorted(Path(p).name.split("_", 1)[1] for p in json.loads(result.stdout)["files"])
    assert names == ["split_members.py", "split_orders_v2.py"]
    assert "collection='orders.v2'" in text(str(next(project.migrations.glob("*_split_orders_v2.py"))))


async def test_a_field_added_with_a_default_that_is_not_a_constant_is_refused(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    """A ``default_factory`` (or a default a file cannot spell) keeps the field out of ``required``: it is refused all the same."""
    before = "import datetime\n" + BEFORE
    write_models(project, before)
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    snapshot = (project.root / "collections" / "_models.json").read_text(encoding="utf-8")
    added = [
        "    seen: datetime.datetime = Field(default_factory=datetime.datetime.now)\n",
        "    since: datetime.date = datetime.date(2019, 4, 23)\n",
        "    seen: Optional[datetime.datetime] = Field(default_factory=datetime.datetime.now)\n",
    ]
    for line in added:
        write_models(project, before.replace("from beanie import Document\n", "from beanie import Document\nfrom pydantic import Field\n")
                     .replace("    age: str\n", "    age: str\n" + line))
        result = cli(project, "create", "stamp", "--from-models")
        field = line.split(":")[0].strip()
        assert result.returncode == 49, result.stdout
        assert f"{PACKAGE}.models.Member: field {field!r} is added with a default that is not a constant" in result.stderr
        assert "2019" not in result.stderr
        assert list(project.migrations.iterdir()) == []
        assert (project.root / "collections" / "_models.json").read_text(encoding="utf-8") == snapshot

    write_models(project, before.replace("from beanie import Document\n", "from beanie import Document\nfrom pydantic import Field\n")
                 .replace("    age: str\n", "    age: str\n    tags: list[str] = Field(default_factory=list)\n"))
    result = cli(project, "--json", "create", "tags", "--from-models")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["collections"][0]["changes"] == ["added 'tags' with default []"]


def test_nested_and_enum_defaults_are_constants_and_an_infinite_one_is_not(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    """A list or dict default holding a list, a dict or an enum member (``[Tier.free]``, ``{"a": [1]}``) was refused as
    "not a constant" (the docs list list, dict and enum members); ``float("inf")`` was written as ``inf``, a name the
    migration raised NameError on for every document."""
    write_models(project, BEFORE)
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    tier = "import enum\n\nfrom beanie import Document\n\n\nclass Tier(str, enum.Enum):\n    free = 'free'\n"
    nested = BEFORE.replace("from beanie import Document\n", tier).replace(
        "    age: str\n", "    age: str\n    tiers: list[Tier] = [Tier.free]\n    limits: dict = {'a': [1, None], 'b': {'c': True}}\n")
    write_models(project, nested)
    result = cli(project, "--json", "create", "defaults", "--from-models")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["collections"][0]["changes"] == [
        "added 'tiers' with default ['free']", "added 'limits' with default {'a': [1, None], 'b': {'c': True}}",
    ]
    namespace: dict[str, Any] = {}
    exec(compile(text(json.loads(result.stdout)["files"][0]), "generated.py", "exec"), namespace)
    assert namespace["upgrade"]({}) == {"tiers": ["free"], "limits": {"a": [1, None], "b": {"c": True}}}

    write_models(project, nested.replace("    age: str\n", "    age: str\n    cap: float = float('inf')\n"))
    refused = cli(project, "create", "cap", "--from-models")
    assert refused.returncode == 49, refused.stdout
    assert "field 'cap' is added with a default that is not a constant" in refused.stderr


NUMBERS_BEFORE = '''
from beanie import Document


class Player(Document):
    level: int
    score: float

    class Settings:
        name = "players"
'''

#: A number field's stored values, as the driver decodes them: an int32 is an ``int``, an int64 an ``Int64``.
SCORES: list[tuple[Any, str]] = [(2.5, "2.5"), (3, "3"), (Int64(4), "4"), (Decimal128("5.25"), "5.25")]


async def test_int64_and_every_number_type_go_through_the_generated_converter(project: Project, cli, db) -> None:  # type: ignore[no-untyped-def]
    """An int64 is an ``int`` field's value as much as an int32, and a ``float`` field holds any BSON number: none is left
    unconverted in a document the migration stamps as done."""
    fast(project)
    await db.players.insert_many([
        {"_id": i, "level": Int64(i) if i % 2 else i, "score": SCORES[i % 4][0]} for i in range(8)
    ])
    assert await db.players.count_documents({"level": {"$type": "long"}}) == 4
    as_text = NUMBERS_BEFORE.replace("    level: int\n    score: float\n", "    level: str\n    score: str\n")
    path = created_from(project, cli, NUMBERS_BEFORE, as_text, "as_text")
    s = project.settings()
    await command.up(s)
    (done,) = await bg.run(s, [path.rsplit("/", 1)[-1]])
    assert done.status == "completed" and done.failed_documents == 0
    docs = await db.players.find({}, {"__rev": 0}).sort("_id", 1).to_list()
    assert docs == [{"_id": i, "level": str(i), "score": SCORES[i % 4][1], "__v": 1} for i in range(8)]


async def test_a_failed_conversion_never_shows_the_document_value(project: Project, cli, db, caplog) -> None:  # type: ignore[no-untyped-def]
    """``int('gold')``'s own message would carry the value into the state, the status, the events and the logs."""
    fast(project)
    caplog.set_level(logging.DEBUG, logger="mongoshift")
    await seed(db, 5)
    await db.members.update_one({"_id": 2}, {"$set": {"age": "gold"}})
    path = created_from(project, cli, BEFORE, BEFORE.replace("    age: str\n", "    age: int\n"), "ages")
    name = path.rsplit("/", 1)[-1]
    s = project.settings()
    await command.up(s)
    events: list[Any] = []
    (failed,) = await bg.run(s, [name], observers=[events.append])
    assert failed.status == "failed" and failed.failed_documents == 1
    (error,) = failed.doc_errors
    assert (error["reason"], error["error_class"]) == ("transform", "ValueError")
    assert error["error"] == "field age: string to int conversion failed (the value is not shown)"
    assert await db.members.count_documents({"_id": 2, "__v": {"$exists": True}}) == 0  # failed, not stamped as done

    status = cli(project, "--json", "background", "status", name)
    assert status.returncode == 0 and "string to int conversion failed" in status.stdout
    shown = [json.dumps(failed.to_json(), default=str), status.stdout, status.stderr, repr(events), caplog.text]
    for collection in await db.list_collection_names():
        if collection != "members":
            shown += [repr(doc) async for doc in db[collection].find()]
    assert events and all("gold" not in text for text in shown)


#: ``mongoshift create shape --from-models`` in a real process that is killed (SIGKILL, as kill -9) at the point
#: between writing its migration and writing the models snapshot.
KILLED_BEFORE_THE_SNAPSHOT = """
import os, runpy, signal, sys
from mongoshift.models import snapshot
snapshot.write = lambda folder, snap: os.kill(os.getpid(), signal.SIGKILL)
sys.argv = ["mongoshift", "create", "shape", "--from-models"]
runpy.run_module("mongoshift", run_name="__main__")
"""


def test_a_run_killed_between_its_migration_and_the_snapshot_is_completed_not_written_again(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    """kill -9 after the migration was written and before the snapshot was made the next run write the same change
    again (a second migration of the same shape step); the file's last line records its shape, and the rerun folds it in."""
    import subprocess
    import sys

    from ..conftest import cli_env

    write_models(project, BEFORE)
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    snapshot = project.root / "collections" / "_models.json"
    before = json.loads(snapshot.read_text(encoding="utf-8"))
    write_models(project, AFTER)

    killed = subprocess.run([sys.executable, "-c", KILLED_BEFORE_THE_SNAPSHOT], cwd=project.root, env=cli_env(), capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9, killed.stderr
    (written,) = project.migrations.glob("*.py")
    assert json.loads(snapshot.read_text(encoding="utf-8")) == before  # the snapshot never got the new shape

    again = cli(project, "--json", "create", "shape", "--from-models")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["files"] == [] and list(project.migrations.glob("*.py")) == [written]
    assert "did not record the shape of members" in again.stderr
    shapes = json.loads(snapshot.read_text(encoding="utf-8"))["shapes"]
    assert shapes["members"]["version"] == 1 and "full_name" in shapes["members"]["fields"]
    # and the next change of the models is the next step, 1 to 2
    write_models(project, AFTER.replace("    nickname: Optional[str] = None\n", ""))
    following = cli(project, "--json", "create", "drop_nickname", "--from-models")
    assert following.returncode == 0, following.stderr
    assert [(c["from_version"], c["to_version"]) for c in json.loads(following.stdout)["collections"]] == [(1, 2)]


#: ``mongoshift collections generate`` killed (SIGKILL) after its declaration files, before the snapshot.
GENERATE_KILLED_BEFORE_THE_SNAPSHOT = f"""
import os, runpy, signal, sys
from mongoshift.models import snapshot
snapshot.write = lambda folder, snap: os.kill(os.getpid(), signal.SIGKILL)
sys.argv = ["mongoshift", "collections", "generate", "--models", "{PACKAGE}.models"]
runpy.run_module("mongoshift", run_name="__main__")
"""


@pytest.mark.parametrize("first", [True, False], ids=["first-generate", "later-generate"])
def test_collections_generate_killed_before_the_snapshot_is_completed_by_a_rerun(project: Project, cli, first: bool) -> None:  # type: ignore[no-untyped-def]
    """Its files are written before the snapshot too: a rerun finds them as the models give them (the three-way
    merge keeps them), writes the snapshot, and then reads as in sync."""
    import subprocess
    import sys

    from ..conftest import cli_env

    if not first:
        write_models(project, BEFORE)
        assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    write_models(project, AFTER)
    killed = subprocess.run(
        [sys.executable, "-c", GENERATE_KILLED_BEFORE_THE_SNAPSHOT], cwd=project.root, env=cli_env(), capture_output=True, text=True, timeout=120
    )
    assert killed.returncode == -9, killed.stderr
    declared = (project.root / "collections" / "members.toml").read_text(encoding="utf-8")
    rerun = cli(project, "--json", "collections", "generate", "--models", f"{PACKAGE}.models")
    assert rerun.returncode == 0, rerun.stderr
    assert [r["action"] for r in json.loads(rerun.stdout)["collections"]] == ["unchanged"]
    assert (project.root / "collections" / "members.toml").read_text(encoding="utf-8") == declared
    assert cli(project, "collections", "generate", "--check").returncode == 0


def test_collections_generate_records_the_shape_a_migration_left_for_it(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    """After a ``create --from-models`` stopped before its snapshot (the state a kill -9 leaves, restored here), a
    ``collections generate`` whose declarations did not change said "recorded now" and wrote nothing; ``--check``
    said it too and passed. Now ``--check`` reports the snapshot out of date (48), and the run writes it."""
    write_models(project, BEFORE)
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    write_models(project, AFTER)
    assert cli(project, "collections", "generate").returncode == 0  # the declarations first, as the docs advise
    snapshot = project.root / "collections" / "_models.json"
    before = snapshot.read_text(encoding="utf-8")
    assert cli(project, "create", "shape", "--from-models").returncode == 0
    snapshot.write_text(before, encoding="utf-8")  # the migration is written, the snapshot is not

    check = cli(project, "collections", "generate", "--check")
    assert check.returncode == 48, check.stderr
    assert "a run without --check records it" in check.stderr and "recorded now" not in check.stderr
    assert snapshot.read_text(encoding="utf-8") == before

    run = cli(project, "collections", "generate")
    assert run.returncode == 0, run.stderr
    assert "recorded now" in run.stderr
    assert json.loads(snapshot.read_text(encoding="utf-8"))["shapes"]["members"]["version"] == 1
    assert cli(project, "collections", "generate", "--check").returncode == 0
    assert json.loads(cli(project, "--json", "create", "again", "--from-models").stdout)["files"] == []


def test_create_from_models_with_no_change_writes_nothing(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    """It said "no migration written" and rewrote the snapshot all the same (same bytes, a new modification time:
    a read-only checkout failed on a run with nothing to do)."""
    write_models(project, BEFORE)
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    snapshot = project.root / "collections" / "_models.json"
    os.utime(snapshot, ns=(1_000_000_000, 1_000_000_000))
    result = cli(project, "--json", "create", "nothing", "--from-models")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["files"] == [] and list(project.migrations.glob("*.py")) == []
    assert snapshot.stat().st_mtime_ns == 1_000_000_000


def test_a_change_with_notes_only_keeps_its_shape_version(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    """A new optional field needs no rewrite: no file, and ``--json`` said ``to_version`` 1 while the snapshot stayed at 0."""
    write_models(project, BEFORE)
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    write_models(project, BEFORE.replace("    legacy: Optional[str] = None\n", "    legacy: Optional[str] = None\n    note: Optional[str] = None\n"))
    result = cli(project, "--json", "create", "note", "--from-models")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    (collection,) = report["collections"]
    assert report["files"] == [] and collection["changes"] == [] and collection["notes"]
    assert (collection["from_version"], collection["to_version"]) == (0, 0)
    assert json.loads((project.root / "collections" / "_models.json").read_text(encoding="utf-8"))["shapes"]["members"]["version"] == 0


def test_a_name_no_file_can_take_is_refused_whether_or_not_a_change_is_found(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    """``create 'bad/name' --from-models`` exited 0 when the models had not changed, and 19 only once they had."""
    write_models(project, BEFORE)
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    for models in (BEFORE, AFTER):
        write_models(project, models)
        result = cli(project, "create", "bad/name", "--from-models")
        assert result.returncode == 19, result.stdout + result.stderr
        assert "invalid migration name 'bad/name'" in result.stderr
        assert list(project.migrations.glob("*.py")) == []
