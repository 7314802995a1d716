"""``status --check`` fails on unfinished work: missing files, background migrations not done, pending files."""

from __future__ import annotations

import json

from .test_cli import QUICK

BACKGROUND = """
from mongoshift import Background

def migrate(doc, ctx):
    {body}
    doc["full_name"] = doc.pop("first", "")
    return doc

background = Background(collection="people", from_version=1, to_version=2, migrate=migrate, pause_ms=0, max_document_errors=0)
"""

WORKS = BACKGROUND.format(body="pass")
BREAKS = BACKGROUND.format(body="raise ValueError('cannot')")


def seed(sync_client, project, n: int = 20) -> None:  # type: ignore[no-untyped-def]
    people = sync_client[project.db].people
    people.insert_many([{"_id": i, "first": f"F{i}", "__v": 1, "__rev": 1} for i in range(n)])
    people.create_index([("__v", 1), ("_id", 1)])


def status(cli, project, *args: str):  # type: ignore[no-untyped-def]
    result = cli(project, "status", "--json", *args)
    return result.returncode, {r["name"]: r for r in json.loads(result.stdout)["migrations"]}


def test_registered_background_migration_shows_its_state_and_fails_the_check_until_completed(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    seed(sync_client, project)
    project.add("0001_names.py", WORKS)
    assert cli(project, "up").returncode == 0  # registers it; no document is touched
    code, rows = status(cli, project, "--check")
    assert code == 31
    assert rows["0001_names.py"]["state"] == "applied" and rows["0001_names.py"]["background"] == "pending"
    human = cli(project, "status")
    assert "applied (pending)" in human.stdout
    assert cli(project, "background", "run", "0001_names.py").returncode == 0
    code, rows = status(cli, project, "--check")
    assert code == 0 and rows["0001_names.py"]["background"] == "completed"


def test_failed_background_migration_fails_the_check_with_32(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    seed(sync_client, project)
    project.add("0001_names.py", BREAKS)
    assert cli(project, "up").returncode == 0
    assert cli(project, "background", "run", "0001_names.py").returncode == 32
    code, rows = status(cli, project, "--check")
    assert code == 32 and rows["0001_names.py"]["background"] == "failed"
    assert status(cli, project)[0] == 0  # without --check: a report, not a verdict


def test_missing_applied_file_fails_the_check_with_8(project, cli) -> None:  # type: ignore[no-untyped-def]
    path = project.add("0001_a.py", QUICK)
    assert cli(project, "up").returncode == 0
    path.unlink()
    result = cli(project, "status", "--check", "--json")
    assert result.returncode == 8, result.stderr
    assert json.loads(result.stdout)["migrations"][0]["state"] == "missing"  # the normal document
    assert "0001_a.py" in result.stderr


def test_a_missing_file_keeps_the_run_that_applied_it(project, cli) -> None:  # type: ignore[no-untyped-def]
    """Its row names the run id that 'run-log' reads, as the row of a file still there does."""
    path = project.add("0001_a.py", QUICK)
    run_id = json.loads(cli(project, "up", "--json").stdout)["run_id"]
    assert status(cli, project)[1]["0001_a.py"]["run_id"] == run_id
    path.unlink()
    row = status(cli, project)[1]["0001_a.py"]
    assert row["state"] == "missing" and row["run_id"] == run_id


def test_a_filtered_list_that_is_empty_says_which_filter(project, cli) -> None:  # type: ignore[no-untyped-def]
    """'list --pending' with every file applied said "no migrations", as for an empty folder."""
    project.add("0001_a.py", QUICK)
    assert cli(project, "list", "--applied").stdout == "no applied migrations\n"
    assert cli(project, "up").returncode == 0
    assert cli(project, "list", "--pending").stdout == "no pending migrations\n"
    assert "0001_a.py" in cli(project, "list", "--applied").stdout


def test_check_reports_the_first_problem_in_a_fixed_order(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """missing (8), then background failed (32), then pending (2), then background not completed (31)."""
    seed(sync_client, project)
    project.add("0001_works.py", WORKS.replace('"people"', '"others"'))  # registered, never run
    project.add("0002_breaks.py", BREAKS)
    gone = project.add("0003_gone.py", QUICK)
    assert cli(project, "up").returncode == 0
    assert cli(project, "background", "run", "0002_breaks.py").returncode == 32
    gone.unlink()
    project.add("0004_pending.py", QUICK)
    assert status(cli, project, "--check")[0] == 8  # all four apply
    project.add("0003_gone.py", QUICK)
    assert status(cli, project, "--check")[0] == 32  # failed, pending, not completed


def test_pending_file_comes_before_an_unfinished_background_migration(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    seed(sync_client, project)
    project.add("0001_names.py", WORKS)
    assert cli(project, "up").returncode == 0
    project.add("0002_next.py", QUICK)
    assert status(cli, project, "--check")[0] == 2
    assert cli(project, "up").returncode == 0
    assert status(cli, project, "--check")[0] == 31


def test_an_applied_file_that_went_missing_is_said_everywhere(project, cli) -> None:  # type: ignore[no-untyped-def]
    """status counts it as missing (not applied) and warns; up and dry-run warn; --check fails with 8."""
    project.add("0001_a.py", QUICK)
    project.add("0002_b.py", QUICK)
    assert cli(project, "up").returncode == 0
    (project.migrations / "0002_b.py").unlink()
    result = cli(project, "status")
    assert result.returncode == 0 and "1 applied, 0 pending, 1 missing" in result.stdout, result.stdout
    assert "the files of applied migrations are missing: 0002_b.py" in result.stderr
    for args in (["up"], ["dry-run", "up"]):
        result = cli(project, *args)
        assert result.returncode == 0 and "missing: 0002_b.py" in result.stderr, (args, result.stderr)
    assert cli(project, "status", "--check").returncode == 8


def test_list_refuses_pending_and_applied_together(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", QUICK)
    result = cli(project, "list", "--pending", "--applied")
    assert result.returncode == 6 and "cannot be combined" in result.stderr
    assert cli(project, "list", "--pending").returncode == 0


def test_strict_check_fails_on_an_applied_file_changed_on_disk_with_4(project, cli) -> None:  # type: ignore[no-untyped-def]
    """What 'up --strict' would refuse fails 'status --check --strict' (or with strict = true), after missing files."""
    path = project.add("0001_a.py", QUICK)
    assert cli(project, "up").returncode == 0
    path.write_text(QUICK + "\n# edited after it was applied\n")
    assert cli(project, "status", "--check").returncode == 0  # not strict: the table's column and a warning
    result = cli(project, "status", "--check", "--strict", "--json")
    assert result.returncode == 4, result.stderr
    assert json.loads(result.stdout)["migrations"][0]["checksum"] == "mismatch"  # the normal document
    assert "applied files changed on disk (strict): 0001_a.py" in result.stderr
    project.write_config(strict=True)
    assert cli(project, "status", "--check").returncode == 4
    project.add("0002_gone.py", QUICK)
    assert cli(project, "up").returncode == 4  # up refuses it too
    assert cli(project, "status", "--strict").returncode == 6  # a verdict flag without the verdict


def test_strict_check_puts_a_missing_file_first(project, cli) -> None:  # type: ignore[no-untyped-def]
    changed = project.add("0001_a.py", QUICK)
    gone = project.add("0002_b.py", QUICK)
    assert cli(project, "up").returncode == 0
    changed.write_text(QUICK + "\n# edited\n")
    gone.unlink()
    assert cli(project, "status", "--check", "--strict").returncode == 8


def test_the_summary_line_says_how_many_pending_files_failed(project, cli) -> None:  # type: ignore[no-untyped-def]
    """A failed file is pending (``up`` runs it again), but "0 applied, 2 pending" under a table whose first row
    says ``failed`` read as if nothing had run: the line names the failed ones among the pending."""
    project.add("0001_a.py", "def up(ctx):\n    raise RuntimeError('no')\n")
    project.add("0002_b.py", QUICK)
    assert cli(project, "up").returncode == 7
    result = cli(project, "status")
    assert result.returncode == 0 and result.stdout.splitlines()[-1] == "0 applied, 2 pending (1 failed)", result.stdout
    project.add("0001_a.py", QUICK)
    assert cli(project, "up").returncode == 0
    assert cli(project, "status").stdout.splitlines()[-1] == "2 applied, 0 pending"


def test_a_paused_or_cancelled_background_migration_is_sent_to_resume_or_retry_not_to_run(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """``status --check`` told a paused or cancelled migration to 'background run' it, which exits 36 or 37
    and does nothing: it names the control that takes it up again."""
    seed(sync_client, project)
    project.add("0001_names.py", WORKS)
    assert cli(project, "up").returncode == 0
    assert cli(project, "background", "pause", "0001_names").returncode == 0
    result = cli(project, "status", "--check")
    assert result.returncode == 31
    assert "0001_names.py paused ('mongoshift background resume 0001_names' continues it)" in result.stderr, result.stderr
    assert "background run" not in result.stderr, result.stderr
    assert cli(project, "background", "cancel", "0001_names", "--yes").returncode == 0
    result = cli(project, "status", "--check", "--json")
    assert result.returncode == 31 and json.loads(result.stdout)
    result = cli(project, "status", "--check")
    assert "0001_names.py cancelled ('mongoshift background retry 0001_names' takes it up again)" in result.stderr, result.stderr
    assert "background run" not in result.stderr, result.stderr


def test_background_status_check_names_the_migrations_it_fails_on(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """It said "background migrations are not all completed" / "a background migration failed": a CI log then
    has to be read again with another command to learn which."""
    seed(sync_client, project)
    project.add("0001_names.py", WORKS)
    assert cli(project, "up").returncode == 0
    result = cli(project, "background", "status", "--check")
    assert result.returncode == 31
    assert "warning: background migrations not completed: 0001_names.py (pending)" in result.stderr, result.stderr
    document = cli(project, "background", "status", "--check", "--json")  # its normal document, with the verdict
    assert document.returncode == 31 and json.loads(document.stdout)["background"][0]["status"] == "pending"
    project.add("0001_names.py", BREAKS)
    assert cli(project, "background", "repin", "0001_names", "--yes").returncode == 0
    assert cli(project, "background", "run", "0001_names").returncode == 32
    result = cli(project, "background", "status", "--check")
    assert result.returncode == 32
    assert "background migrations failed: 0001_names.py ('mongoshift background status 0001_names' says why)" in result.stderr, result.stderr
