"""What the tables and JSON documents show: whole names on a narrow terminal, the checksum
verdict of ``list``, the time ``baseline`` stored, and the demo's closing status."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from rich.console import Console

from mongoshift.cli.demo import run_demo
from mongoshift.cli.output import Output

LONG_NAME = "20261201090000_backfill_the_customer_loyalty_tier_and_points.py"
QUICK = "def up(ctx):\n    ctx.db.marks.insert_one({'file': __name__})\n\ndef down(ctx):\n    pass\n"


def _rendered(width: int, rows: list[tuple[Any, ...]]) -> str:
    out = Output()
    buffer = io.StringIO()
    out.out = Console(file=buffer, force_terminal=True, width=width, highlight=False, soft_wrap=True, color_system=None)
    out.table(["migration", "state", "batch", "applied at", "checksum"], rows)
    return buffer.getvalue()


@pytest.mark.parametrize("width", [60, 80, 140])
@pytest.mark.parametrize("name", [LONG_NAME, "20261201090000_add_users_email_index.py"])
def test_a_narrow_terminal_never_cuts_the_migration_name(width: int, name: str) -> None:
    text = _rendered(width, [(name, "applied (running)", 3, "2026-12-01T09:00:00+00:00", "ok")])
    lines = text.splitlines()
    assert all(len(line) <= width for line in lines)
    body = [line for line in lines if line.startswith("│")]
    first_cells = "".join(line.split("│")[1].strip() for line in body)
    assert first_cells.startswith(name)  # every character, in order, whatever else wraps
    if len(name) < 45 and width >= 80:
        assert name in text  # a usual name stays on one line at 80 columns


def test_list_applied_shows_the_checksum_verdict(project, cli) -> None:  # type: ignore[no-untyped-def]
    path = project.add("0001_a.py", QUICK)
    assert cli(project, "up")[0] == 0
    code, stdout, _ = cli(project, "list", "--applied", "--json")
    assert code == 0 and [r["checksum"] for r in json.loads(stdout)["migrations"]] == ["ok"]
    path.write_text(QUICK + "# edited\n")
    code, stdout, _ = cli(project, "list", "--applied")
    assert code == 0 and stdout.splitlines()[-1].split("\t")[-1] == "mismatch"


def test_baseline_json_reports_the_time_it_stored(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", QUICK)
    project.add("0002_b.py", QUICK)
    code, stdout, _ = cli(project, "baseline", "--to", "0002_b", "--yes", "--json")
    assert code == 0
    reported = {row["name"]: row["applied_at"] for row in json.loads(stdout)["adopted"]}
    code, stdout, _ = cli(project, "status", "--json")
    shown = {row["name"]: row["applied_at"] for row in json.loads(stdout)["migrations"]}
    assert None not in reported.values()
    assert reported == shown


def test_the_demo_ends_with_the_status_after_the_background_migration(capsys) -> None:  # type: ignore[no-untyped-def]
    run_demo(Output(), orders_count=400)
    lines = capsys.readouterr().out.splitlines()
    registered = lines.index("after 'mongoshift up': the background migration is registered, not yet run")
    running = next(i for i, line in enumerate(lines) if line.startswith("running the background migration"))
    final = lines.index("'mongoshift status' after the background migration")
    assert registered < running < final
    rows = {line.split("\t")[0]: line.split("\t")[1] for line in lines[final + 2 :] if line.endswith(".py") or "\t" in line}
    assert rows["20260104000000_order_totals.py"] == "applied (completed)"
    assert "applied (pending)" not in lines[running:]
    assert rows["20260103000000_rename_fullname.py"] == "applied"


def test_the_demo_json_status_is_the_final_one(capsys) -> None:  # type: ignore[no-untyped-def]
    run_demo(Output(json_mode=True), orders_count=400)
    document = json.loads(capsys.readouterr().out)
    final = {row["name"]: row["background"] for row in document["status"]}
    assert final["20260104000000_order_totals.py"] == "completed"
    assert document["background"]["status"] == "completed"
    assert document["application"]["lost_app_writes"] == 0 and document["application"]["old_shape_left"] == 0


@pytest.mark.parametrize("width", [80, 100, 140])
def test_a_wide_character_name_is_measured_in_terminal_columns(width: int) -> None:
    """A CJK character takes two columns: a name measured by its characters was given too little
    room and cut (or folded on a terminal wide enough to show it whole)."""
    from rich.cells import cell_len

    name = "顧客の注文を移行する顧客の注文_orders"
    row = (name, "applied (running)", 3, "2026-12-01T09:00:00+00:00", "ok")
    text = _rendered(width, [row])
    lines = text.splitlines()
    assert all(cell_len(line) <= width for line in lines)
    body = [line for line in lines if line.startswith("│")]
    for column, value in enumerate(row, start=1):  # no cell loses a character to a column too narrow
        assert "".join(line.split("│")[column].strip() for line in body).replace(" ", "") == str(value).replace(" ", "")
    if width >= 100:
        assert name in text  # room enough for the whole name on one line


def test_import_json_lists_the_warning_about_records_naming_no_file(project, cli, sync_client) -> None:  # type: ignore[no-untyped-def]
    """docs/adoption.md: a record naming no file is counted in ``unnamed`` and a warning says so; with
    ``--json`` that warning is in the document's ``warnings``, as every other warning of the run."""
    import datetime

    sync_client[project.db].changelog.insert_many([
        {"fileName": "0001-a.js", "appliedAt": datetime.datetime(2024, 1, 1), "migrationBlock": 1},
        {"appliedAt": datetime.datetime(2024, 1, 2), "migrationBlock": 1},
    ])
    project.add("0001_a.py", QUICK)
    for dry in ([], ["--dry-run"]):
        code, stdout, stderr = cli(project, "import", "--from", "migrate-mongo", "--json", *dry)
        assert code == 0
        report = json.loads(stdout)
        assert report["unnamed"] == 1
        said = (
            "1 migrate-mongo record without a file name (the field missing, null, not text, or text without a letter or digit): "
            "left out, as no file can match such a record"
        )
        assert report["warnings"] == [said]
        assert stderr.count("without a file name (") == 1


@pytest.mark.parametrize("flags", [["demo", "--uri", "mongodb://127.0.0.1:1"], ["--db", "mine", "demo"], ["demo", "--config", "x.toml"]])
def test_demo_refuses_connection_and_project_flags_it_would_ignore(tmp_path, cli, monkeypatch, flags: list[str]) -> None:  # type: ignore[no-untyped-def]
    """The demo starts its own server and project: a --uri of the user's server was silently ignored."""
    import mongoshift.cli.demo

    started: list[object] = []
    monkeypatch.setattr(mongoshift.cli.demo, "run_demo", started.append)  # never a server in this test
    code, stdout, stderr = cli(tmp_path, *flags)
    assert code == 6 and stdout == "" and started == []
    flag = next(f for f in flags if f.startswith("--"))
    assert f"{flag} would be ignored" in stderr


def test_the_demo_shows_the_status_before_up_before_ups_own_lines(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The "before" table came after the lines `up` logs while it applies (taken before, printed after)."""
    both = io.StringIO()  # stdout and stderr in one stream, as a terminal shows them
    monkeypatch.setattr("sys.stdout", both)
    monkeypatch.setattr("sys.stderr", both)
    run_demo(Output(), orders_count=400)
    lines = both.getvalue().splitlines()
    before = lines.index("before 'mongoshift up'")
    applying = next(i for i, line in enumerate(lines) if "applying 20260101000000_create_users.py" in line)
    assert before < applying < lines.index("mongoshift up")
