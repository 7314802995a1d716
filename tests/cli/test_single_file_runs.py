"""A queue or a script driving files one by one: ``up FILE --batch N`` makes several
single-file runs one rollback unit, ``--ordered`` keeps them in the line's order.
(The selection rules themselves are unit-tested in tests/unit/test_plan.py.)"""

from __future__ import annotations

import json

from .test_cli import QUICK


def results(run) -> list[tuple[str, str, int | None]]:  # type: ignore[no-untyped-def]
    assert run.returncode == 0, run.stderr
    return [(r["name"], r["status"], r["batch"]) for r in json.loads(run.stdout)["results"]]


def test_single_file_runs_sharing_a_batch_roll_back_together(project, cli) -> None:  # type: ignore[no-untyped-def]
    for name in ("0001_a.py", "0002_b.py", "0003_c.py"):
        project.add(name, QUICK)
    assert results(cli(project, "up", "0001_a.py", "--json")) == [("0001_a.py", "applied", 1)]
    planned = json.loads(cli(project, "dry-run", "up", "0002_b.py", "--batch", "1", "--json").stdout)["dry_run"]
    assert [(r["name"], r["batch"]) for r in planned] == [("0002_b.py", 1)]
    assert results(cli(project, "up", "0002_b.py", "--batch", "1", "--json")) == [("0002_b.py", "applied", 1)]
    # one rollback unit: a plain down (the last batch) takes both back
    assert [(n, s) for n, s, _ in results(cli(project, "down", "--json"))] == [("0002_b.py", "reverted"), ("0001_a.py", "reverted")]


def test_ordered_refuses_a_file_ahead_of_the_line_and_a_rollback_under_later_files(project, cli) -> None:  # type: ignore[no-untyped-def]
    for name in ("0001_a.py", "0002_b.py"):
        project.add(name, QUICK)
    refused = cli(project, "up", "0002_b.py", "--ordered", "--json")
    assert refused.returncode == 23, refused.stderr
    error = json.loads(refused.stdout)["error"]
    assert error["kind"] == "out_of_order" and error["details"]["blocked_by"] == ["0001_a.py"]
    assert "0001_a.py" in refused.stderr
    assert results(cli(project, "up", "0001_a.py", "--ordered", "--json")) == [("0001_a.py", "applied", 1)]
    assert results(cli(project, "up", "0002_b.py", "--ordered", "--json")) == [("0002_b.py", "applied", 2)]
    for command in (("down", "0001_a.py", "--ordered"), ("dry-run", "down", "0001_a.py", "--ordered")):
        refused = cli(project, *command, "--json")
        assert refused.returncode == 23, refused.stderr
        assert json.loads(refused.stdout)["error"]["details"]["blocked_by"] == ["0002_b.py"]


def test_a_batch_label_past_what_the_changelog_can_hold_is_refused_before_the_file_runs(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """``--batch 99999999999999999999`` ran the migration, then could not record it (an int64 overflow): exit 1,
    its writes kept and no record, so the next ``up`` ran it again. The largest label keeps the next batch writable."""
    project.add("0001_a.py", QUICK)
    project.add("0002_b.py", QUICK)
    for label in ("99999999999999999999", "9007199254740992"):
        refused = cli(project, "up", "0001_a.py", "--batch", label, "--json")
        assert refused.returncode == 6, refused.stderr
        assert "batch (--batch) must be a whole number from 1 to 9,007,199,254,740,991" in json.loads(refused.stdout)["error"]["message"]
    assert list(sync_client[project.db]["marks"].find()) == []
    assert results(cli(project, "up", "0001_a.py", "--batch", "9007199254740991", "--json")) == [("0001_a.py", "applied", 2**53 - 1)]
    assert results(cli(project, "up", "--json")) == [("0002_b.py", "applied", 2**53)]
