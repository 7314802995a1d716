"""``mongoshift baseline --to NAME``: what the database already has is recorded applied, never run."""

from __future__ import annotations

import json

from mongoshift.api.adoption import baseline
from mongoshift.api.migrations import down, up

from ..cli.test_cli import cli
from .test_import import MARK

REQUIRES_A = MARK + '\nrequires = ["0001_a"]\n'


async def test_baseline_marks_files_applied_without_running_them(project, sync_client) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", MARK.format(name="0001_a"))
    project.add("0002_b.py", MARK.format(name="0002_b"))
    project.add("0003_c.py", REQUIRES_A.format(name="0003_c"))
    db = sync_client[project.db]

    assert cli(project, "baseline", "--to", "0002_b").returncode == 6  # not interactive: --yes is needed
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
