"""Operating background migrations from CI and Kubernetes: totals across retries, exit codes of
stopped runs, progress lines without a terminal, failed-document reasons and a status that fits
80 columns."""

from __future__ import annotations

import json
import os
import re

from mongoshift.api import background as bg, migrations as command

from ..conftest import start_cli
from .conftest import background_file, seed
from .test_processes import wait_for_migrated

NAME = "0001_names.py"


async def test_totals_after_retry_of_a_failed_partition_count_every_generation(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    """A partition fails (a broken batch function), the fix is pinned, retry: nothing migrated goes uncounted."""
    await seed(db.people, 1000)
    broken = '''
from mongoshift import Background

async def migrate_batch(docs, ctx):
    for doc in docs:
        doc["tag"] = "batch"
    return docs[:-1] if any(doc["_id"] >= 600 for doc in docs) else docs

background = Background(collection="people", from_version=1, to_version=2, migrate_batch=migrate_batch,
                        batch_size=100, pause_ms=0, max_slice_failures=1)
'''
    path = fast_project.add(NAME, broken)
    s = fast_project.settings()
    await command.up(s)
    (failed,) = await bg.run(s, [NAME])
    assert failed.status == "failed"
    assert 0 < await db.people.count_documents({"__v": 2}) < 1000
    path.write_text(broken.replace('return docs[:-1] if any(doc["_id"] >= 600 for doc in docs) else docs', "return docs"))
    await bg.repin(s, NAME)
    await bg.apply_control(s, NAME, "retry")
    (done,) = await bg.run(s, [NAME])
    migrated = await db.people.count_documents({"__v": 2})
    assert done.status == "completed" and migrated == 1000
    assert done.totals["migrated"] == migrated
    (shown,) = await bg.status(s, NAME)
    assert shown.totals["migrated"] == migrated


async def test_totals_after_retry_from_start_keep_what_earlier_generations_migrated(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    """Documents fail over budget, the fix is pinned, retry --from-start: the totals still match the collection."""
    await seed(db.people, 1000)
    failing = background_file(batch_size=100, extra="max_document_errors=5,")
    path = fast_project.add(
        NAME, failing.replace("def migrate(doc, ctx):", "def migrate(doc, ctx):\n    if doc['_id'] % 50 == 0:\n        raise ValueError('cannot split')")
    )
    s = fast_project.settings()
    await command.up(s)
    (failed,) = await bg.run(s, [NAME])
    assert failed.status == "failed" and failed.failed_documents > 5
    # a plain retry leaves the failed documents out and would fail again: the error names the way out
    assert failed.last_error is not None and f"'mongoshift background retry {NAME} --from-start'" in failed.last_error
    path.write_text(failing)
    await bg.repin(s, NAME)
    await bg.apply_control(s, NAME, "retry", from_start=True)
    (done,) = await bg.run(s, [NAME])
    migrated = await db.people.count_documents({"__v": 2})
    assert done.status == "completed" and migrated == 1000 and done.failed_documents == 0
    assert done.totals["migrated"] == migrated
    (shown,) = await bg.status(s, NAME)
    assert shown.totals["migrated"] == migrated
    totals = shown.totals  # the failed documents were forgotten from scanned too: read again, counted once
    assert totals["scanned"] == totals["migrated"] + totals["skipped"] + totals["failed"] + totals["conflicts"], totals
    assert (totals["failed"], totals["scanned"]) == (0, 1000)  # as status says: 0 failed documents


def _people(fast_project, sync_client):  # type: ignore[no-untyped-def]
    return sync_client[fast_project.db].people


async def test_a_run_stopped_by_pause_exits_36_and_by_cancel_exits_37(fast_project, db, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 3_000)
    fast_project.add(NAME, background_file(batch_size=50, extra="adaptive=False,").replace("pause_ms=0", "pause_ms=50"))  # >= 3 s of work
    assert cli(fast_project, "up").returncode == 0
    proc = start_cli(fast_project, "background", "run", "0001_names", "--json")
    wait_for_migrated(_people(fast_project, sync_client), 200, proc)
    assert cli(fast_project, "background", "pause", "0001_names", "--reason", "night").returncode == 0
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 36, err[-2000:]
    error = json.loads(out)["error"]  # exactly one JSON document, saying which
    assert error["kind"] == "background_paused" and error["details"]["paused"] == [NAME]
    assert f"'mongoshift background resume {NAME}' continues it" in error["message"]
    assert cli(fast_project, "background", "run", "0001_names").returncode == 36  # still paused: not a success

    assert cli(fast_project, "background", "resume", "0001_names").returncode == 0
    proc = start_cli(fast_project, "background", "run", "0001_names", "--json")
    wait_for_migrated(_people(fast_project, sync_client), 600, proc)
    assert cli(fast_project, "background", "cancel", "0001_names", "--yes").returncode == 0
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 37, err[-2000:]
    error = json.loads(out)["error"]
    assert error["kind"] == "background_cancelled" and error["details"]["cancelled"] == [NAME]
    assert f"'mongoshift background retry {NAME}' takes it up again" in error["message"]


async def test_a_run_of_several_exits_with_the_most_serious_outcome(fast_project, db, cli) -> None:  # type: ignore[no-untyped-def]
    """Failed (32) outranks cancelled (37), which outranks paused (36); the others still ran."""
    for collection in ("people", "people2", "people3"):
        await seed(db[collection], 20)
    fast_project.add("0001_a.py", background_file())
    fast_project.add("0002_b.py", background_file().replace('collection="people"', 'collection="people2"'))
    fast_project.add(
        "0003_c.py",
        background_file()
        .replace('collection="people"', 'collection="people3"')
        .replace("def migrate(doc, ctx):", "def migrate(doc, ctx):\n    raise RuntimeError('bad')"),
    )
    assert cli(fast_project, "up").returncode == 0
    assert cli(fast_project, "background", "pause", "0001_a").returncode == 0
    assert cli(fast_project, "background", "cancel", "0002_b", "--yes").returncode == 0
    both = cli(fast_project, "background", "run", "0001_a", "0002_b", "--json")
    assert both.returncode == 37
    assert json.loads(both.stdout)["error"]["details"] == {
        "paused": ["0001_a.py"],
        "cancelled": ["0002_b.py"],
        "failed": [],
        "stopped": [],
        "background": json.loads(both.stdout)["error"]["details"]["background"],
    }
    assert cli(fast_project, "background", "run", "0001_a", "0003_c").returncode == 32
    assert await db.people3.count_documents({"__v": 2}) == 0
    assert cli(fast_project, "background", "resume", "0001_a").returncode == 0
    assert cli(fast_project, "background", "run", "0001_a").returncode == 0


CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


async def test_a_run_without_a_terminal_logs_a_progress_line_per_interval(fast_project, db, cli) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 2_000)
    fast_project.add(NAME, background_file(batch_size=50, extra="adaptive=False,").replace("pause_ms=0", "pause_ms=30"))
    assert cli(fast_project, "up").returncode == 0
    run = cli(fast_project, "background", "run", "0001_names", "--json", "--progress-interval", "0.3")
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout)["background"][0]["status"] == "completed"  # stdout: one JSON document
    lines = [line for line in run.stderr.splitlines() if " progress " in line]
    assert len(lines) >= 2, run.stderr
    counts = r"(\d[\d,]*/2,000 documents \(\d+%\)|\d+/\? documents \(-\))"  # "?" until the pass is planned
    shape = re.compile(
        rf"^mongoshift: INFO progress 0001_names\.py: {counts}, (-|[\d,.]+ docs/s), ETA (-|\d+:\d\d:\d\d), pass \d+, (pending|running|completed)$"
    )
    assert all(shape.match(line) for line in lines), lines
    assert "2,000/2,000 documents (100%)" in lines[-1] and lines[-1].endswith("pass 1, completed"), lines  # how it ended
    assert not CONTROL.search(run.stderr)
    assert "lane-" not in run.stderr and "_id" not in run.stderr


async def test_a_long_interval_still_logs_a_first_line_within_seconds(fast_project, db, cli) -> None:  # type: ignore[no-untyped-def]
    """A run planning or rewriting a large collection says so at once, not one interval later."""
    await seed(db.people, 2_000)
    fast_project.add(NAME, background_file(batch_size=50, extra="adaptive=False,").replace("pause_ms=0", "pause_ms=120"))
    assert cli(fast_project, "up").returncode == 0
    run = cli(fast_project, "background", "run", "0001_names", "--progress-interval", "3600")
    assert run.returncode == 0, run.stderr[-2000:]
    lines = [line for line in run.stderr.splitlines() if " progress " in line]
    # 40 batches with 120 ms pauses: the run takes about 5 s, far less than the interval, so
    # a line under way can only come from the early first read.
    assert len(lines) >= 2 and not lines[0].endswith(", completed"), run.stderr
    assert lines[-1].endswith("pass 1, completed"), lines


async def test_quiet_runs_log_no_progress_and_a_bad_interval_exits_6(fast_project, db, cli) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 300)
    fast_project.add(NAME, background_file(batch_size=50, extra="adaptive=False,").replace("pause_ms=0", "pause_ms=30"))
    assert cli(fast_project, "up").returncode == 0
    for bad in ("0", "-1", "soon", "nan"):
        refused = cli(fast_project, "background", "run", "0001_names", "--progress-interval", bad, "--json")
        assert refused.returncode == 6, (bad, refused.stderr)
        assert json.loads(refused.stdout)["error"]["kind"] == "config_invalid" and "--progress-interval" in refused.stderr
    quiet = cli(fast_project, "background", "run", "0001_names", "-q", "--progress-interval", "0.1")
    assert quiet.returncode == 0
    assert " progress " not in quiet.stderr and quiet.stderr.strip() == ""


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
LONG_NAME = "20261201090000_split_customer_names_into_first_and_last.py"


def terminal(cli, project, width: int, *args: str):  # type: ignore[no-untyped-def]
    """The command, in this process, as on a terminal of ``width`` columns (rich reads FORCE_COLOR and
    COLUMNS when the command makes its consoles; the ``cli`` fixture restores the environment after)."""
    saved = {key: os.environ.get(key) for key in ("FORCE_COLOR", "COLUMNS", "NO_COLOR")}
    os.environ.update(FORCE_COLOR="1", COLUMNS=str(width))
    os.environ.pop("NO_COLOR", None)
    try:
        done = cli(project, *args)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return done.returncode, ANSI.sub("", done.stdout)


async def _failing_documents(cli, fast_project, db, *, failing: int, budget: int) -> None:  # type: ignore[no-untyped-def]
    """Documents with secret-looking ids and values; ``failing`` of them make the transform raise."""
    await db.people.insert_many([{"_id": f"uid-{i:04d}-zq", "first": f"secret-{i:04d}", "last": "x", "__v": 1, "__rev": 1} for i in range(300)])
    await db.people.create_index([("__v", 1), ("_id", 1)])
    source = background_file(batch_size=50, extra=f"max_document_errors={budget},").replace(
        "def migrate(doc, ctx):",
        # 25 different messages (the same one twice is shown once)
        f"def migrate(doc, ctx):\n    if int(doc['_id'][4:8]) < {failing}:\n"
        "        raise ValueError(f'cannot split the name, case {int(doc[\"_id\"][4:8]) % 25}: ' + 'it has no space ' * 30)",
    )
    fast_project.add(LONG_NAME, source)
    assert cli(fast_project, "up").returncode == 0


async def test_status_of_a_migration_shows_why_documents_failed_without_their_ids(fast_project, db, cli) -> None:  # type: ignore[no-untyped-def]
    await _failing_documents(cli, fast_project, db, failing=30, budget=100)
    assert cli(fast_project, "background", "run", LONG_NAME).returncode == 0
    shown = cli(fast_project, "background", "status", LONG_NAME, "--json")
    report = json.loads(shown.stdout)["background"][0]
    assert report["failed_documents"] == 30
    assert report["doc_error_counts"] == [{"reason": "transform", "error_class": "ValueError", "code": None, "count": 30}]
    assert len(report["doc_errors"]) == 20  # the most recent, capped
    assert all(e["error_class"] == "ValueError" and len(e["error"]) <= 200 for e in report["doc_errors"])
    assert report["doc_errors"][-1]["error"].startswith("cannot split the name")
    on_terminal = terminal(cli, fast_project, 80, "background", "status", LONG_NAME)[1]
    for output in (shown.stdout, cli(fast_project, "background", "status", LONG_NAME).stdout, on_terminal):
        assert "cannot split the name" in output
        assert "uid-" not in output and "secret-" not in output  # no document id, no document value


async def test_status_of_a_failed_run_shows_its_reasons_before_any_roll_up(fast_project, db, cli) -> None:  # type: ignore[no-untyped-def]
    """Failed over budget by a lane mid-pass: the reasons are still in the partitions, and shown."""
    await _failing_documents(cli, fast_project, db, failing=10, budget=2)
    assert cli(fast_project, "background", "run", LONG_NAME).returncode == 32
    report = json.loads(cli(fast_project, "background", "status", LONG_NAME, "--json").stdout)["background"][0]
    assert report["status"] == "failed" and report["failed_documents"] >= 3
    assert report["doc_error_counts"][0]["count"] == report["failed_documents"]
    text = cli(fast_project, "background", "status", LONG_NAME).stdout
    assert "transform" in text and "ValueError" in text and "uid-" not in text


async def test_duplicate_key_reasons_show_the_index_and_code_but_not_the_values(fast_project, db, cli) -> None:  # type: ignore[no-untyped-def]
    await db.people.create_index("slug", unique=True, sparse=True)
    await seed(db.people, 40)
    source = background_file(batch_size=40, extra="max_document_errors=5,").replace(
        "    return doc", "    doc['slug'] = 'taken-slug-value' if doc['_id'] in (3, 4) else f\"s{doc['_id']}\"\n    return doc"
    )
    fast_project.add(NAME, source)
    assert cli(fast_project, "up").returncode == 0
    assert cli(fast_project, "background", "run", "0001_names").returncode == 0
    shown = cli(fast_project, "background", "status", "0001_names", "--json")
    report = json.loads(shown.stdout)["background"][0]
    assert report["doc_error_counts"] == [{"reason": "write", "error_class": None, "code": 11000, "count": 1}]
    assert "slug" in report["doc_errors"][0]["error"] and "taken-slug-value" not in shown.stdout


async def test_status_fits_80_and_60_columns_and_never_cuts_the_name(fast_project, db, cli) -> None:  # type: ignore[no-untyped-def]
    await _failing_documents(cli, fast_project, db, failing=10, budget=2)
    assert cli(fast_project, "background", "run", LONG_NAME).returncode == 32  # a failed one: a long last error too
    for width in (80, 60):
        for args in (("background", "status"), ("background", "status", LONG_NAME)):
            code, text = terminal(cli, fast_project, width, *args)
            assert code == 0
            lines = text.splitlines()
            assert all(len(line) <= width for line in lines), (width, args, [line for line in lines if len(line) > width])
            assert any(line.strip() == LONG_NAME for line in lines), text  # whole, on its own line
            assert "…" not in text.replace("max_document_errors (2), when", "")[: text.index(LONG_NAME) + len(LONG_NAME)]
            assert "failed" in text


async def test_a_completed_migration_that_migrated_nothing_warns_about_from_version(fast_project, db, cli) -> None:  # type: ignore[no-untyped-def]
    """Documents written before versioning have no __v (version 0): from_version=1 matches none of them."""
    await seed(db.people, 120, version=None)
    fast_project.add(NAME, background_file(batch_size=50))
    assert cli(fast_project, "up").returncode == 0
    run = cli(fast_project, "background", "run", "0001_names", "--json")
    assert run.returncode == 0
    for report in (json.loads(run.stdout)["background"][0], json.loads(cli(fast_project, "background", "status", "--json").stdout)["background"][0]):
        assert report["status"] == "completed" and report["totals"]["migrated"] == 0
        (warning,) = report["warnings"]
        assert "migrated 0 documents, with 120 documents in" in warning and "from_version (1)" in warning and "version 0" in warning
    assert "was from_version (1) right?" in cli(fast_project, "background", "status").stderr
    assert "was from_version (1) right?" in terminal(cli, fast_project, 80, "background", "status")[1]


async def test_a_completed_migration_with_nothing_left_to_do_does_not_warn(fast_project, db, cli) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 30, version=2)
    await db.people.insert_one({"_id": "other", "kind": "x", "__v": 1})
    fast_project.add(NAME, background_file(extra="filter={'kind': {'$exists': False}},"))
    assert cli(fast_project, "up").returncode == 0
    run = cli(fast_project, "background", "run", "0001_names", "--json")
    report = json.loads(run.stdout)["background"][0]
    assert report["totals"]["migrated"] == 0 and report["warnings"] == []


async def test_run_all_with_nothing_runnable_says_so_and_names_the_failed_ones(fast_project, db, cli) -> None:  # type: ignore[no-untyped-def]
    """`run --all` after a failure: not "no background migrations registered", and the failed one is named."""
    await seed(db.people, 50)
    failing = background_file(batch_size=10).replace("def migrate(doc, ctx):", "def migrate(doc, ctx):\n    raise ValueError('cannot split')")
    fast_project.add(NAME, failing)
    await command.up(fast_project.settings())
    assert cli(fast_project, "background", "run", "--all").returncode == 32
    again = cli(fast_project, "background", "run", "--all")
    assert again.returncode == 0, again.stderr
    assert "nothing to run" in again.stdout and "no background migrations registered" not in again.stdout
    assert f"{NAME} (failed)" in again.stderr
    as_json = cli(fast_project, "background", "run", "--all", "--json")
    assert as_json.returncode == 0 and json.loads(as_json.stdout) == {"background": [], "not_runnable": {NAME: "failed"}}
    assert f"{NAME} (failed)" in as_json.stderr  # the warning as without --json, which only moves the report to stdout


async def test_run_all_that_runs_others_still_names_the_failed_one_it_left_out(fast_project, db, cli) -> None:  # type: ignore[no-untyped-def]
    """docs/background.md: ``--all`` leaves a failed, paused or cancelled migration out "with a warning naming it"
    and exits 0 when the rest is done. It named it only when nothing else was runnable."""
    await seed(db.people, 50)
    await seed(db.others, 20)
    failing = background_file(batch_size=10).replace("def migrate(doc, ctx):", "def migrate(doc, ctx):\n    raise ValueError('cannot split')")
    fast_project.add(NAME, failing)
    await command.up(fast_project.settings())
    assert cli(fast_project, "background", "run", "--all").returncode == 32
    fast_project.add("0002_others.py", background_file().replace('collection="people"', 'collection="others"'))
    await command.up(fast_project.settings())
    run = cli(fast_project, "background", "run", "--all", "--json")
    assert run.returncode == 0, run.stderr
    assert [r["name"] for r in json.loads(run.stdout)["background"]] == ["0002_others.py"]
    assert f"not run by --all: {NAME} (failed)" in run.stderr, run.stderr
    assert await db.others.count_documents({"__v": 2}) == 20


async def test_a_migration_named_twice_runs_and_reports_once(fast_project, db, cli) -> None:  # type: ignore[no-untyped-def]
    """``background run NAME NAME.py migrations/NAME.py`` (a shell's completion beside a typed name) ran it, and
    listed it, three times."""
    await seed(db.people, 20)
    fast_project.add(NAME, background_file())
    await command.up(fast_project.settings())
    stem = NAME.removesuffix(".py")
    run = cli(fast_project, "background", "run", stem, NAME, f"migrations/{NAME}", "--json")
    assert run.returncode == 0, run.stderr
    assert [r["name"] for r in json.loads(run.stdout)["background"]] == [NAME]
    assert await db.people.count_documents({"__v": 2}) == 20
