"""A project's declarations are read once per run, however many background files a run aligns.

A ``collections/*.py`` declaration is user code: executing it for every
background file (and again on every reload poll) made a run's cost and side
effects grow with the number of files.
"""

from __future__ import annotations

from pathlib import Path

from mongoshift.api import background as bg, migrations as command

from .conftest import seed

DECLARATION = """
from pathlib import Path

with Path({log!r}).open("a") as log:
    log.write("executed\\n")

collection = {{"versioning": {{"current": 4, "min": 0}}}}
"""


def step_file(from_version: int) -> str:
    return f"""
from mongoshift import Background

def migrate(doc, ctx):
    doc["step{from_version}"] = True
    return doc

background = Background(collection="people", from_version={from_version}, to_version={from_version + 1}, migrate=migrate, batch_size=50, pause_ms=0)
"""


def declare_counted(project, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    log = tmp_path / "executions.log"
    folder = project.root / "collections"
    folder.mkdir(exist_ok=True)
    (folder / "people.py").write_text(DECLARATION.format(log=str(log)), encoding="utf-8")
    for index in (1, 2, 3):
        project.add(f"000{index}_step{index}.py", step_file(index))
    return log


def executions(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


async def test_up_aligning_three_background_files_and_converging_reads_the_declarations_once(fast_project, db, tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = declare_counted(fast_project, tmp_path)
    await seed(db.people, 20)
    report = await command.up(fast_project.settings(), converge=True)
    assert [r.status for r in report.results] == ["applied", "applied", "applied"]
    assert report.converge is not None and report.converge.success
    assert executions(log) == 1


async def test_a_background_run_over_several_files_reads_the_declarations_once(fast_project, db, tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = declare_counted(fast_project, tmp_path)
    await seed(db.people, 20)
    await command.up(fast_project.settings())
    before = executions(log)
    reports = await bg.run(fast_project.settings())
    assert [r.status for r in reports] == ["completed", "completed", "completed"]
    assert await db.people.count_documents({"__v": 4, "step3": True}) == 20
    assert executions(log) - before == 1
