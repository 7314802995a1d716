"""docs/versioning.md runs as written: its code blocks are extracted and run against the server,
so the guide cannot drift from the code again."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from mongoshift.api import background, migrations as command

DOC = Path(__file__).resolve().parents[2] / "docs" / "versioning.md"
README_TEXT = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
FILE_HEADER = re.compile(r"^# ([\w/]+\.py)\n")


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def files_of_the_example() -> dict[str, str]:
    """The blocks that start with ``# path/of/file.py``: the complete example's files."""
    return {m.group(1): block for block in python_blocks() if (m := FILE_HEADER.match(block))}


def fragments() -> list[str]:
    return [block for block in python_blocks() if not FILE_HEADER.match(block)]


async def run_block(source: str, namespace: dict[str, Any]) -> None:
    """Run a block as written; top-level ``await`` is allowed, as in a REPL or a notebook."""
    import ast

    code = compile(source, str(DOC), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(code, namespace)
    if result is not None:
        await result


def test_the_doc_has_the_blocks_this_test_runs() -> None:
    assert set(files_of_the_example()) == {
        "myapp/shapes.py",
        "myapp/people.py",
        "migrations/20261201090000_people_v2.py",
        "migrations/20261215090000_people_contract.py",
    }
    assert len(fragments()) == 2  # "Declaring shapes" and "Guarded writes"


def test_the_doc_says_where_shape_1_comes_from() -> None:
    # Data written before versioning has no __v: version 0, which define_shapes(2, {1: ...}) refuses
    # to read and a from_version=1 rewrite never touches; the guide must say so next to the example.
    text = DOC.read_text(encoding="utf-8")
    assert "define_shapes(1)" in text and "from_version=0" in text


async def test_the_fragments_run(db) -> None:  # type: ignore[no-untyped-def]
    declaring, guarded = fragments()
    shapes: dict[str, Any] = {}
    await run_block(declaring, shapes)
    people = shapes["PEOPLE"]
    doc = people.stamp({"first": "Ada", "last": "Lovelace"})
    await db.people.insert_one(doc)
    namespace = {"coll": db.people, "id_": doc["_id"], "doc": doc, "email": "ada@example.org"}
    await run_block(guarded, namespace)
    stored = await db.people.find_one({"_id": doc["_id"]})
    assert stored["email"] == "ada@example.org" and stored["__rev"] == 2


async def test_the_complete_example_runs_expand_rewrite_contract(project, db, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    files = files_of_the_example()
    app = project.root / "app"
    (app / "myapp").mkdir(parents=True)
    (app / "myapp" / "__init__.py").write_text("")
    for name in ("myapp/shapes.py", "myapp/people.py"):
        (app / name).write_text(files[name])
    monkeypatch.syspath_prepend(str(app))  # "install the application in the environment that runs mongoshift"
    for module in [m for m in list(__import__("sys").modules) if m == "myapp" or m.startswith("myapp.")]:
        monkeypatch.delitem(__import__("sys").modules, module)

    # The previous release (define_shapes(1), as the doc says) still writes shape 1 while the expand release runs.
    from mongoshift.versioning import define_shapes

    previous = define_shapes(1)
    await db.people.insert_many([previous.stamp({"name": f"Old Writer{i}"}) for i in range(5)])
    from myapp import people  # type: ignore[import-not-found]

    ada = await people.create(db, "Ada", "Lovelace")
    assert (await people.get(db, ada))["last"] == "Lovelace"
    old = await db.people.find_one({"name": "Old Writer0"})
    assert (await people.get(db, old["_id"]))["first"] == "Old"  # read through upcast
    await people.rename(db, old["_id"], "Writer-Renamed")
    renamed = await db.people.find_one({"_id": old["_id"]})
    assert (renamed["__v"], renamed["last"], renamed["__rev"]) == (2, "Writer-Renamed", 2)

    # Rewrite: the background migration, registered by up and run to the end.
    v2 = "migrations/20261201090000_people_v2.py"
    (project.root / v2).write_text(files[v2])
    settings = project.settings()
    await command.up(settings)
    [done] = await background.run(settings, ["20261201090000_people_v2"])
    assert done.status == "completed", done
    assert await db.people.count_documents({"__v": {"$ne": 2}}) == 0
    assert await db.people.count_documents({"name": {"$exists": True}}) == 0

    # Contract: requires the rewrite, which is done.
    contract = "migrations/20261215090000_people_contract.py"
    (project.root / contract).write_text(files[contract])
    report = await command.up(project.settings())
    assert [r.name for r in report.results] == ["20261215090000_people_contract.py"]
    assert "last_1_first_1" in [i["name"] async for i in await db.people.list_indexes()]

    # The next release: minimum=2, as the doc's last sentence writes it.
    line = re.search(r"`(PEOPLE = define_shapes\(.*?minimum=2\))`", DOC.read_text(encoding="utf-8"))
    assert line is not None
    import myapp.shapes as shapes  # type: ignore[import-not-found]

    namespace = dict(vars(shapes))
    exec(line.group(1), namespace)
    assert namespace["PEOPLE"].minimum == 2
    from mongoshift.versioning.errors import ShapeVersionError

    with pytest.raises(ShapeVersionError):
        namespace["PEOPLE"].upcast({"name": "x y", "__v": 1})



async def test_the_readmes_versioning_sample_runs_on_data_written_before_versioning(db) -> None:  # type: ignore[no-untyped-def]
    """The README's block read ``doc["__rev"]``: a document written before versioning has no ``__rev``
    (it counts as 0, "existing data needs no backfill"), so the sample failed there with a KeyError."""
    [block] = [b for b in re.findall(r"```python\n(.*?)```", README_TEXT, re.S) if "retry_on_conflict(rename)" in b]
    await db.users.insert_one({"name": "Ada", "__v": 1})  # legacy: the shape before, never a revision
    await run_block(block, {"db": db})
    legacy = await db.users.find_one({"__v": 1})
    assert (legacy["name"], legacy["__rev"]) == ("Ada L.", 1)


async def test_the_upsert_by_hand_works_on_legacy_documents_with_a_null_revision(db) -> None:  # type: ignore[no-untyped-def]
    """The guide's upsert recipe ``$inc``s the revision, which the server refuses on ``__rev: null`` (a revision
    0 the contract allows): the write failed on such legacy documents and the guide did not say so."""
    from pymongo.errors import WriteError

    text = " ".join(DOC.read_text(encoding="utf-8").split())
    recipe = {"$set": {"email": "x"}, "$setOnInsert": {"__v": 2}, "$inc": {"__rev": 1}}
    assert '`{"$set": {...}, "$setOnInsert": {"__v": PEOPLE.current}, "$inc": {"__rev": 1}}`' in text
    await db.people.insert_many([{"_id": 1, "name": "Ada", "__rev": None}, {"_id": 2, "name": "Bob"}])
    with pytest.raises(WriteError):
        await db.people.update_one({"_id": 1}, recipe, upsert=True)
    backfill = re.search(r"`coll\.(update_many\(.*?\))`", text)
    assert backfill is not None, "the guide says how to give legacy null revisions 0"
    await eval(f"coll.{backfill.group(1)}", {"coll": db.people})
    for id_ in (1, 2, 3):
        await db.people.update_one({"_id": id_}, recipe, upsert=True)
    stored = await db.people.find({}, {"name": 0}).sort("_id", 1).to_list()
    assert stored == [{"_id": 1, "__rev": 1, "email": "x"}, {"_id": 2, "__rev": 1, "email": "x"}, {"_id": 3, "__v": 2, "__rev": 1, "email": "x"}]
