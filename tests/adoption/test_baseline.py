"""``mongoshift baseline --to NAME``: what the database already has is recorded applied, never run."""

from __future__ import annotations

import json

import pytest

from mongoshift.api.adoption import baseline, import_history
from mongoshift.api.migrations import down, status, up
from mongoshift.errors import LockHeldError
from mongoshift.project.session import open_session

from .test_import import MARK

REQUIRES_A = MARK + '\nrequires = ["0001_a"]\n'


async def test_baseline_marks_files_applied_without_running_them(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", MARK.format(name="0001_a"))
    project.add("0002_b.py", MARK.format(name="0002_b"))
    project.add("0003_c.py", REQUIRES_A.format(name="0003_c"))
    db = sync_client[project.db]

    assert cli(project, "baseline", "--to", "0002_b").returncode == 42  # not interactive: --yes is needed
    report = json.loads(cli(project, "baseline", "--to", "migrations/0002_b.py", "--yes", "--json").stdout)
    assert [r["name"] for r in report["adopted"]] == ["0001_a.py", "0002_b.py"]
    assert report["origin"] == "baseline" and report["batch"] == 1
    again = await baseline(project.settings(), "0002_b")  # idempotent
    assert again.adopted == [] and again.kept == ["0001_a.py", "0002_b.py"]

    rows = json.loads(cli(project, "status", "--json").stdout)["migrations"]
    assert [(r["state"], r["origin"], r["checksum"]) for r in rows] == [
        ("applied", "baseline", "ok"), ("applied", "baseline", "ok"), ("pending", None, None)  # checksums from disk
    ]
    assert db.marks.count_documents({}) == 0  # nothing ran

    await up(project.settings())  # 0003 requires 0001: a baseline record satisfies it
    assert [d["file"] for d in db.marks.find()] == ["0003_c"]
    await down(project.settings())
    for args in (["down"], ["redo", "0002_b"]):
        refused = cli(project, *args)
        assert refused.returncode == 13 and "never ran" in refused.stderr, refused.stderr


async def test_import_and_baseline_wait_for_the_migration_lock(project) -> None:  # type: ignore[no-untyped-def]
    """Both write the changelog under the lock: while another run holds it they refuse (exit 3) and
    record nothing; their dry runs take no lock."""
    project.add("0001_a.py", MARK.format(name="0001_a"))
    settings = project.settings()
    async with open_session(settings, take_lock=True):
        for call in (baseline(settings, "0001_a"), import_history(settings, "pymongo-migrate")):
            with pytest.raises(LockHeldError):
                await call
        assert [r.name for r in (await baseline(settings, "0001_a", dry_run=True)).adopted] == ["0001_a.py"]
    assert [r.state for r in await status(settings)] == ["pending"]


async def test_a_baselined_file_that_up_force_runs_is_mongoshifts_own_and_rolls_back(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """``up FILE --force`` runs a baselined file's ``up``: from then on mongoshift ran it, so the record is no longer
    ``origin: baseline``, and ``down`` runs its ``down`` instead of refusing it as one "mongoshift never ran"."""
    project.add("0001_a.py", MARK.format(name="0001_a"))
    db = sync_client[project.db]
    assert cli(project, "baseline", "--to", "0001_a", "--yes").returncode == 0
    assert cli(project, "up", "0001_a", "--force", "--yes").returncode == 0
    assert db.marks.count_documents({}) == 1  # it ran
    (row,) = json.loads(cli(project, "status", "--json").stdout)["migrations"]
    assert (row["state"], row["origin"]) == ("applied", None), row
    rolled = cli(project, "down")
    assert rolled.returncode == 0, rolled.stderr
    assert db.marks.count_documents({}) == 0
