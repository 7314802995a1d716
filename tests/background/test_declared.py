"""A background migration aligned with its collection's declaration (converge's ``versioning``)."""

from __future__ import annotations

import pytest
from pymongo.errors import WriteError

from mongoshift.api import background as bg, collections as cv, migrations as command
from mongoshift.errors import ConfigInvalidError, ConvergeFailedError

from .conftest import background_file


def declare(project, versioning: str) -> None:  # type: ignore[no-untyped-def]
    folder = project.root / "collections"
    folder.mkdir(exist_ok=True)
    (folder / "people.toml").write_text(f"versioning = {versioning}\n", encoding="utf-8")


async def test_the_engine_takes_the_field_names_from_the_declaration(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    declare(fast_project, '{ current = 2, min = 0, field = "shape", revision_field = "rev" }')
    await db.people.insert_many([{"_id": i, "first": f"F{i}", "last": f"L{i}", "shape": 1, "rev": 4} for i in range(120)])
    await db.people.create_index([("shape", 1), ("_id", 1)])
    fast_project.add("0001_names.py", background_file(batch_size=50))
    await command.up(fast_project.settings())
    (result,) = await bg.run(fast_project.settings(), ["0001_names.py"])
    assert result.status == "completed" and result.totals["migrated"] == 120
    assert await db.people.count_documents({"shape": 2, "rev": 5}) == 120
    assert await db.people.count_documents({"__v": {"$exists": True}}) == 0  # the default names were never used


async def test_a_to_version_above_current_is_refused_before_anything_is_written(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    declare(fast_project, "{ current = 1, min = 0 }")
    fast_project.add("0001_names.py", background_file())
    with pytest.raises(ConfigInvalidError, match="raise current first"):
        await command.up(fast_project.settings())
    assert await db["_mongoshift_migrations"].count_documents({}) == 0
    assert await db["_mongoshift_background"].count_documents({}) == 0


async def test_a_spec_naming_other_fields_than_the_declaration_is_refused(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    declare(fast_project, "{ current = 2, min = 0 }")
    fast_project.add("0001_names.py", background_file(extra='version_field="schema",'))
    with pytest.raises(ConfigInvalidError, match="version_field is 'schema' but collection 'people' declares '__v'"):
        await command.up(fast_project.settings())


async def test_min_is_raised_once_the_background_migration_rewrote_the_old_documents(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    """Expand (current 2, min 1) -> background rewrite -> contract (min 2): the guard follows the data."""
    declare(fast_project, "{ current = 2, min = 1 }")
    await cv.converge(fast_project.settings())  # the version index and the validator rules
    await db.people.insert_many([{"_id": i, "first": f"F{i}", "last": f"L{i}", "__v": 1, "__rev": 1} for i in range(60)])
    fast_project.add("0001_names.py", background_file(batch_size=25))
    await command.up(fast_project.settings())

    declare(fast_project, "{ current = 2, min = 2 }")
    with pytest.raises(ConvergeFailedError, match="raising min to 2 is refused"):
        await cv.converge(fast_project.settings())

    (result,) = await bg.run(fast_project.settings(), ["0001_names.py"])
    assert result.status == "completed"
    report = await cv.converge(fast_project.settings())
    assert [(a.target, a.action) for a in report.actions if a.changing] == [("validator", "modify")]
    with pytest.raises(WriteError):  # the contract holds: an old-shape write is refused now
        await db.people.insert_one({"_id": 999, "first": "Old", "__v": 1, "__rev": 1})
