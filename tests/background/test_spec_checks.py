"""A background spec is checked completely when its file loads: every problem in one error (exit 20),
the file named, nothing registered, no traceback and never a value of the filter."""

from __future__ import annotations

import json

import pytest

SECRET = "leaked-value@example.com"

MANY_PROBLEMS = f'''
from mongoshift import Background

requires = ["0000_base", "0000_base"]

def migrate(doc, ctx):
    return doc

background = Background(
    collection="people",
    from_version=2,
    to_version=1,
    migrate=migrate,
    filter={{"email": {{"$in": {{"{SECRET}"}}}}}},
    slice_ms=True,
    batch_size="100",
    max_parallel=2.0,
    partitions={{"over_partition": True}},
    bogus=1,
)
'''


def _refused(cli, project, name: str) -> dict:  # type: ignore[no-untyped-def, type-arg]
    result = cli(project, "up", "--json")
    assert result.returncode == 20, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and SECRET not in result.stdout + result.stderr
    error = json.loads(result.stdout)["error"]
    assert error["kind"] == "invalid_export" and error["message"].startswith(f"{name}: ")
    return error  # type: ignore[no-any-return]


async def test_every_problem_of_a_spec_is_reported_at_once(project, db, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_bad.py", MANY_PROBLEMS)
    error = _refused(cli, project, "0001_bad.py")
    problems = error["details"]["problems"]
    where = sorted({p.split(":")[0] for p in problems})
    assert where == [
        "background.batch_size",
        "background.bogus",
        "background.filter",
        "background.max_parallel",
        "background.partitions.over_partition",
        "background.slice_ms",
        "background.to_version",  # a rule between two values, reported with the values' own problems
        "requires names '0000_base' twice",
    ]
    assert error["message"].startswith(f"0001_bad.py: {len(problems)} problems: ")
    assert "background.filter: email.$in is of type set, which is not a BSON value" in error["message"]  # where and what, never the value
    assert await db["_mongoshift_background"].count_documents({}) == 0
    assert await db["_mongoshift_migrations"].count_documents({}) == 0


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (f'{{"{SECRET}"}}', "is of type set, which is not a BSON value"),
        (f'__import__("decimal").Decimal("{len(SECRET)}.5")', "is of type Decimal, which is not a BSON value"),
        ('__import__("datetime").date(2024, 1, 2)', "is of type date, which is not a BSON value"),
        ("2 ** 70", "is an integer outside BSON's 64 bits"),
        ("object()", "is of type object, which is not a BSON value"),
    ],
)
async def test_a_filter_that_bson_cannot_hold_fails_the_import_check_not_up(project, db, value: str, said: str, cli) -> None:  # type: ignore[no-untyped-def]
    project.add(
        "0001_names.py",
        f'''
from mongoshift import Background

def migrate(doc, ctx):
    return doc

background = Background(collection="people", from_version=1, to_version=2, migrate=migrate, filter={{"tag": {value}}})
''',
    )
    error = _refused(cli, project, "0001_names.py")
    assert error["details"]["problems"] == [f"background.filter: tag {said}"]
    dry = cli(project, "dry-run", "up", "--json")  # the same check, before anything is written
    assert dry.returncode == 20 and SECRET not in dry.stdout + dry.stderr
    assert await db["_mongoshift_background"].count_documents({}) == 0


async def test_a_step_migration_refuses_the_settings_of_the_document_modes(project, db, cli) -> None:  # type: ignore[no-untyped-def]
    project.add(
        "0001_step.py",
        '''
from mongoshift import Background

async def step(ctx):
    return {"checkpoint": None, "done": True}

background = Background(
    collection="people", from_version=0, to_version=1, step=step,
    filter={"active": True}, version_field="v", batch_size=10, max_conflict_retries=1, transaction=True,
)
''',
    )
    problems = _refused(cli, project, "0001_step.py")["details"]["problems"]
    assert sorted(p.split(":")[0] for p in problems) == [
        "background.batch_size", "background.filter", "background.max_conflict_retries", "background.version_field"
    ]
    assert all("a step migration does its own reads and writes" in p for p in problems)
    assert await db["_mongoshift_background"].count_documents({}) == 0


async def test_occ_version_only_refuses_a_revision_field_it_would_ignore(project, db, cli) -> None:  # type: ignore[no-untyped-def]
    project.add(
        "0001_names.py",
        '''
from mongoshift import Background

def migrate(doc, ctx):
    return doc

background = Background(collection="people", from_version=1, to_version=2, migrate=migrate, occ="version-only", revision_field="r")
''',
    )
    problems = _refused(cli, project, "0001_names.py")["details"]["problems"]
    assert len(problems) == 1 and problems[0].startswith("background.revision_field: occ='version-only' guards writes by the version alone")
    assert await db["_mongoshift_background"].count_documents({}) == 0


def test_occ_version_only_on_a_collection_declaring_versioning_is_still_accepted() -> None:
    """The declaration's revision field is not forced onto a spec whose guard has none."""
    from mongoshift.background.plan.declared import align
    from mongoshift.schema.background import Background
    from mongoshift.schema.collections import Versioning

    spec = Background(collection="people", from_version=1, to_version=2, migrate=lambda doc, ctx: doc, occ="version-only")
    aligned = align(spec, Versioning(current=2, field="sv", revision_field="rv"), file="0001_names.py", collection="people")
    assert (aligned.version_field, aligned.occ, "revision_field" in aligned.model_fields_set) == ("sv", "version-only", False)


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ("from_version=1, to_version=2 ** 63", "background.to_version: Input should be less than or equal to 9223372036854775807"),
        ("from_version=2 ** 63, to_version=2 ** 63 + 1", "background.from_version: Input should be less than or equal to 9223372036854775807"),
        ('from_version=1, to_version=2, partitions={"min_partition_docs": 2 ** 64}', "background.partitions.min_partition_docs: Input should be less"),
    ],
)
async def test_a_number_bson_cannot_store_is_refused_when_the_file_loads_not_by_an_overflow_in_up(project, db, cli, settings: str, problem: str) -> None:  # type: ignore[no-untyped-def]
    """Before, these passed the check, then ``up`` (or the first run) died with an unexpected OverflowError, exit 1."""
    project.add("0001_names.py", f"from mongoshift import Background\n\nbackground = Background(collection='people', {settings}, migrate=lambda d, c: d)\n")
    error = _refused(cli, project, "0001_names.py")
    assert any(p.startswith(problem) for p in error["details"]["problems"]), error["details"]["problems"]
    assert await db["_mongoshift_background"].count_documents({}) == 0


def test_a_file_with_background_and_up_is_refused_naming_what_it_declares(project, cli) -> None:  # type: ignore[no-untyped-def]
    """It said the file declared "background and no up or down", the opposite of what was wrong."""
    project.add(
        "0001_mixed.py",
        "from mongoshift import Background\n\ndef up(ctx):\n    pass\n\ndef down(ctx):\n    pass\n\n"
        "background = Background(collection='people', from_version=1, to_version=2, migrate=lambda d, c: d)\n",
    )
    error = _refused(cli, project, "0001_mixed.py")
    assert error["details"]["problems"] == ["it declares background and also up, down: a background migration has no up or down; split it into two files"]
