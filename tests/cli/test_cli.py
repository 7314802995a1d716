"""The command line as a user runs it: real processes, real exit codes, one JSON document."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest

from ..conftest import cli_env, cli_process, reaped, start_cli

SLOW = """
import time

def up(ctx):
    ctx.db.marks.insert_one({{"file": "{name}", "at": "start"}})
    time.sleep({seconds})
    ctx.db.marks.insert_one({{"file": "{name}", "at": "end"}})

def down(ctx):
    ctx.db.marks.delete_many({{"file": "{name}"}})
"""

QUICK = "def up(ctx):\n    ctx.db.marks.insert_one({'file': __name__})\n\ndef down(ctx):\n    pass\n"


def wait_for(predicate, timeout: float = 120) -> None:  # type: ignore[no-untyped-def]
    """Until ``predicate()`` holds; ``timeout`` only guards against a hang (a loaded machine may start a process slowly)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.1)


def test_json_status_and_check_exit_code(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", QUICK)
    result = cli(project, "status", "--check", "--json")
    assert result.returncode == 2
    document = json.loads(result.stdout)  # exactly one JSON document
    assert document["migrations"][0]["state"] == "pending"
    assert cli(project, "up", "--json").returncode == 0
    result = cli(project, "--json", "status", "--check")
    assert result.returncode == 0 and json.loads(result.stdout)["migrations"][0]["checksum"] == "ok"


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (["up", "--bogus-flag"], 6, "No such option"),
        (["up", "0099_missing.py"], 8, "not found"),
        (["down", "0001_a.py"], 9, "not applied"),
        (["down", "0099_missing.py"], 8, "not found"),  # a name nothing knows is a typo (it said "not applied", 9)
        (["redo", "0099_missing"], 8, "not found"),
        (["down", "--to", "0099_missing"], 8, "not found"),
        (["down", "--steps", "abc"], 6, "'abc' is not a valid integer."),  # click's words said "integer range"
        (["down", "--batch", "1", "--steps", "1"], 6, "mutually exclusive"),
        (["up", "--wait", "nan"], 6, "'nan' is not a finite number"),  # it waited forever for a held lock
        (["redo", "--wait", "inf"], 6, "'inf' is not a finite number"),
        (["create", "bad/name"], 19, "invalid migration name"),
        (["up", "--force"], 6, "name it"),
        (["init"], 16, "already exists"),
        (["squash", "--to", "0099_missing.py"], 8, "not found"),  # refused before it asks (or exits 42 without a terminal)
        (["baseline", "--to", "0099_missing"], 8, "not found"),
        (["background", "run"], 6, "name the background migrations to run, or pass --all"),
        (["background", "run", "0001_a.py", "--all"], 6, "NAMES and --all exclude each other"),  # it said "name them, or pass --all"
    ],
)
def test_mistakes_get_their_exit_code(project, args: list[str], code: int, text: str, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", QUICK)
    result = cli(project, *args, "--json")
    assert result.returncode == code, result.stderr
    assert text in json.loads(result.stdout)["error"]["message"]
    assert text in result.stderr


def test_create_without_the_migrations_folder_is_the_missing_folder_code_status_gives(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.migrations.rmdir()
    assert [cli(project, *args, "--json").returncode for args in (["status"], ["create", "add users"])] == [8, 8]


def test_create_names_the_new_file_relative_to_the_project_folder(project, cli) -> None:  # type: ignore[no-untyped-def]
    """The README shows ``created migrations/..._add_index.py``; it printed the machine's absolute path."""
    result = cli(project, "create", "add users email index")
    assert result.returncode == 0, result.stderr
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("created ")]
    assert line.startswith("created migrations/") and line.endswith("_add_users_email_index.py"), line
    as_json = json.loads(cli(project, "create", "another", "--json").stdout)
    assert os.path.isabs(as_json["path"])  # --json keeps the absolute path


def test_broken_file_gets_invalid_export(project, cli, sync_client) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", "def up(ctx:\n")
    result = cli(project, "up")
    assert result.returncode == 20 and "0001_a.py" in result.stderr
    # before anything is written: no lock, no changelog, not even the database (they were created first)
    assert project.db not in sync_client.list_database_names()


def test_bad_environment_value_fails_closed(project) -> None:  # type: ignore[no-untyped-def]
    result = cli_process(project, "status", env={**cli_env(), "MONGOSHIFT_LOCK_TTL_SECONDS": "soon"})
    assert result.returncode == 6 and "MONGOSHIFT_LOCK_TTL_SECONDS" in result.stderr


def test_unreachable_server_fails_fast_without_the_password(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.write_config(connect_timeout_seconds=1.5)
    result = cli(project, "status", "--uri", "mongodb://admin:s3cret@127.0.0.1:1/?directConnection=true")
    assert result.returncode == 5
    # fast, and said why: a refused port fails at the first attempt, not after the timeout
    assert "connection refused" in result.stderr and "within" not in result.stderr, result.stderr
    assert "127.0.0.1:1" in result.stderr and "s3cret" not in result.stderr + result.stdout


def test_full_cycle_from_the_command_line(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.migrations.rmdir()
    project.config.unlink()
    assert cli(project, "init", "--uri", project.uri, "--db", project.db).returncode == 0
    created = cli(project, "create", "add users", "--json")
    assert created.returncode == 0
    name = json.loads(created.stdout)["file"]
    assert cli(project, "dry-run", "up", "--json").returncode == 0
    up = cli(project, "up", "--json")
    assert [r["status"] for r in json.loads(up.stdout)["results"]] == ["applied"]
    listed = json.loads(cli(project, "list", "--applied", "--json").stdout)["migrations"]
    assert [r["name"] for r in listed] == [name]
    assert json.loads(cli(project, "redo", "--json").stdout)["results"][1]["status"] == "applied"
    assert json.loads(cli(project, "down", "--json").stdout)["results"][0]["status"] == "reverted"
    assert json.loads(cli(project, "list", "--pending", "--json").stdout)["migrations"][0]["state"] == "reverted"


def test_strict_refuses_a_changed_file(project, cli) -> None:  # type: ignore[no-untyped-def]
    path = project.add("0001_a.py", QUICK)
    assert cli(project, "up").returncode == 0
    path.write_text(QUICK + "# edited\n")
    project.add("0002_b.py", QUICK)
    status = cli(project, "status", "--json")
    assert json.loads(status.stdout)["migrations"][0]["checksum"] == "mismatch"
    assert cli(project, "up", "--strict").returncode == 4
    assert cli(project, "up").returncode == 0  # not strict: a warning


@pytest.mark.parametrize("command", [("up",), ("dry-run", "up"), ("up", "--strict")], ids=" ".join)
def test_strict_from_the_project_file_names_the_setting_as_the_way_out(project, cli, command: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    """With ``strict = true`` in the project file the refusal said "run without --strict": there was no flag to
    leave out, and a run without one was refused the same way. It names the setting now; the flag alone, the flag."""
    path = project.add("0001_a.py", QUICK)
    assert cli(project, "up").returncode == 0
    path.write_text(QUICK + "# edited\n")
    assert "(restore them, or run without --strict)" in cli(project, "up", "--strict", "--json").stdout
    project.write_config(strict=True)
    result = cli(project, *command, "--json")
    assert result.returncode == 4
    message = json.loads(result.stdout)["error"]["message"]
    assert message == (
        "applied migration files changed on disk: 0001_a.py (restore them, or turn the strict setting off: "
        "strict = false in the project file, or MONGOSHIFT_STRICT=false)"
    )


#: Holds its migration until the test creates the file ``go`` beside the project (a bound of two minutes against a hang).
HELD = """
import pathlib, time

def up(ctx):
    ctx.db.marks.insert_one({"file": "slow", "at": "start"})
    go = pathlib.Path("go")
    for _ in range(1200):
        if go.exists():
            break
        time.sleep(0.1)
    ctx.db.marks.insert_one({"file": "slow", "at": "end"})

def down(ctx):
    ctx.db.marks.delete_many({"file": "slow"})
"""


def test_two_runs_at_once_never_both_apply(project, sync_client) -> None:  # type: ignore[no-untyped-def]
    # The first run holds the lock in its migration until the second has been refused: two runs started together
    # (a fixed two-second migration) were not at once on a loaded machine, where the second started after the first
    # had finished (found flaky in a user trial: [0, 0]).
    project.add("0001_slow.py", HELD)
    first = start_cli(project, "up")
    with reaped(first):
        wait_for(lambda: sync_client[project.db].marks.count_documents({"at": "start"}) == 1 or first.poll() is not None)
        second = start_cli(project, "up")
        refused = second.wait(timeout=120)
        (project.root / "go").touch()
        codes = sorted([first.wait(timeout=120), refused])
    assert codes == [0, 3]
    marks = list(sync_client[project.db].marks.find({"file": "slow"}))
    assert sorted(m["at"] for m in marks) == ["end", "start"]  # applied exactly once
    waiting = [start_cli(project, "up", "0001_slow.py", "--force", "--yes", "--wait", "60") for _ in range(2)]
    assert [p.wait(timeout=60) for p in waiting] == [0, 0]  # --wait serialises them
    assert sync_client[project.db].marks.count_documents({"at": "end"}) == 3


def test_kill_9_leaves_a_lock_that_the_next_run_on_this_host_takes_over(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    project.write_config(lock_ttl_seconds=600)  # far off: the takeover owes nothing to the TTL
    project.add("0001_slow.py", SLOW.format(name="slow", seconds=60))
    victim = start_cli(project, "up")
    locks = sync_client[project.db]["_mongoshift_locks"]
    wait_for(lambda: sync_client[project.db].marks.count_documents({}) == 1)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert locks.count_documents({}) == 1
    shown = json.loads(cli(project, "lock", "--json").stdout)
    assert shown["held"] and shown["holder"]["pid"] == victim.pid
    audit = json.loads(cli(project, "audit", "--json").stdout)
    stale = [f["message"] for f in audit["findings"] if f["check"] == "line.lock_stale"]
    assert len(stale) == 1 and "no longer runs" in stale[0] and "the next run takes it over" in stale[0]
    project.add("0001_slow.py", QUICK)
    taken = cli(project, "up")  # what audit promised
    assert taken.returncode == 0, taken.stderr
    assert "took over the lock" in taken.stderr and str(victim.pid) in taken.stderr
    # the migration it was running, never recorded, may have done part of its work (one mark of two)
    assert "0001_slow.py (up) was next in line when the run that held the lock stopped" in taken.stderr, taken.stderr
    assert "This run runs it again from the start" in taken.stderr  # it is in this run's plan: said so, not "next time"
    assert locks.count_documents({}) == 0


@pytest.mark.parametrize("case", ["plain", "fails again", "transaction", "recorded", "none"])
def test_a_migration_left_unfinished_by_a_run_whose_lock_expired_is_named(project, sync_client, cli, case: str) -> None:  # type: ignore[no-untyped-def]
    """The run that takes over a lock its holder never released names the first body of that holder's plan
    whose outcome it never recorded, unless it runs in a transaction (nothing kept); a plan it recorded
    whole names nothing."""
    project.add("0001_a.py", QUICK)
    project.add("0002_b.py", "def up(ctx):\n    raise ValueError('half done before')\n" if case == "fails again" else QUICK)
    if case == "recorded":
        assert cli(project, "up").returncode == 0
        project.add("0003_c.py", QUICK)
    else:  # the dead run had recorded its first body
        assert cli(project, "up", "0001_a.py").returncode == 0
    locks = sync_client[project.db]["_mongoshift_locks"]
    past = datetime.now(UTC) - timedelta(minutes=5)
    note = {"steps": [{"name": name, "direction": "up", "transaction": case == "transaction"} for name in ("0001_a.py", "0002_b.py")]}
    locks.insert_one({"_id": "migration_lock", "owner": "dead-run", "nonce": "n", "host": "another-host", "pid": 1,
                      "executed_by": "ci", "ttl_ms": 60_000, "locked_at": past, "expires_at": past,
                      **({} if case == "none" else {"working_on": note})})
    if case == "fails again":  # the warning still shows, before the error, in text and in --json
        text = cli(project, "up")
        assert text.returncode == 7 and text.stderr.count("0002_b.py (up) was next in line") == 1, text.stderr
        assert text.stderr.index("was next in line") < text.stderr.index("error:")
        return
    result = cli(project, "up", "--json")
    assert result.returncode == 0, result.stderr
    warnings = json.loads(result.stdout)["warnings"]
    named = [w for w in warnings if "was next in line when the run that held the lock stopped" in w]
    if case == "plain":
        assert named == [w for w in warnings if w.startswith("0002_b.py (up)")] and len(named) == 1, warnings
        assert "may have done part of its work" in named[0] and result.stderr.count(named[0]) == 1, result.stderr
        assert "took over the lock migration_lock: its holder left it unrenewed past its time-to-live" in result.stderr
    else:
        assert named == [], warnings
    assert locks.count_documents({}) == 0


def test_a_lock_of_another_host_waits_for_unlock_or_its_ttl(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """Its pid means nothing here, dead or not: only ``unlock`` or its TTL end it."""
    project.add("0001_a.py", QUICK)
    locks = sync_client[project.db]["_mongoshift_locks"]
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    now = datetime.now(UTC)
    held = {"_id": "migration_lock", "owner": "far-run", "nonce": "n", "host": "another-host", "pid": dead.pid,
            "executed_by": "ci", "ttl_ms": 600_000, "locked_at": now, "expires_at": now + timedelta(minutes=10)}
    locks.insert_one(held)
    refused = cli(project, "up", "--json")
    assert refused.returncode == 3 and json.loads(refused.stdout)["error"]["kind"] == "lock_held"
    assert cli(project, "unlock").returncode == 42  # not interactive: needs --yes
    assert cli(project, "unlock", "--yes").returncode == 0
    assert locks.count_documents({}) == 0
    locks.insert_one({**held, "expires_at": now - timedelta(seconds=1)})  # its TTL passed
    assert cli(project, "up").returncode == 0


def test_ctrl_c_stops_at_the_next_migration_boundary(project, sync_client) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_slow.py", SLOW.format(name="first", seconds=2))
    project.add("0002_next.py", QUICK)
    proc = start_cli(project, "up", "--json")
    wait_for(lambda: sync_client[project.db].marks.count_documents({}) == 1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 11, err
    error = json.loads(out)["error"]
    assert [r["name"] for r in error["details"]["results"]] == ["0001_slow.py"]
    records = {r["name"]: r["status"] for r in sync_client[project.db]["_mongoshift_migrations"].find()}
    assert records == {"0001_slow.py": "applied"}  # it never looked at ctx.cancelled: it ran to its end
    assert sync_client[project.db]["_mongoshift_locks"].count_documents({}) == 0


# The README's advice: a long migration polls ctx.cancelled and stops early. The first run works
# until the stop arrives (its "start" mark is the test's cue); a later run does the whole job.
POLLS_CANCELLED = """
import time

def up(ctx):
    first = ctx.db.marks.count_documents({}) == 0
    ctx.db.marks.insert_one({"at": "start"})
    deadline = time.monotonic() + 120
    while first and time.monotonic() < deadline:
        if ctx.cancelled.is_set():
            ctx.log.info("stopped early")
            return
        time.sleep(0.05)
    ctx.db.marks.insert_one({"at": "end"})
"""


def test_ctrl_c_during_a_migration_that_stops_early_never_records_it_applied(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_polls.py", POLLS_CANCELLED)
    proc = start_cli(project, "up", "--json")
    wait_for(lambda: sync_client[project.db].marks.count_documents({}) == 1, timeout=60)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 11, err
    error = json.loads(out)["error"]
    assert error["kind"] == "aborted" and "not recorded as applied" in error["message"]
    assert [(r["name"], r["status"], r["reason"]) for r in error["details"]["results"]] == [("0001_polls.py", "failed", "cancelled")]
    assert sync_client[project.db].marks.count_documents({"at": "end"}) == 0
    status = json.loads(cli(project, "status", "--json").stdout)
    assert [(m["name"], m["state"]) for m in status["migrations"]] == [("0001_polls.py", "failed")]
    assert cli(project, "up").returncode == 0  # the next up finishes it
    assert sync_client[project.db].marks.count_documents({"at": "end"}) == 1
    assert sync_client[project.db]["_mongoshift_migrations"].find_one({"name": "0001_polls.py"})["status"] == "applied"


def test_lock_says_when_the_holders_lease_ran_out(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """A lock whose lease ran out by the server's clock is shown as such: the next run takes it over (it read as held)."""
    import datetime

    project.add("0001_a.py", QUICK)
    assert cli(project, "status").returncode == 0  # the project's collections exist
    locks = sync_client[project.db]["_mongoshift_locks"]
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    locks.insert_one({
        "_id": "migration_lock", "owner": "run-1", "host": "elsewhere", "pid": 4242, "executed_by": "ci",
        "locked_at": past - datetime.timedelta(minutes=5), "expires_at": past, "ttl_ms": 60_000,
    })
    shown = cli(project, "lock")
    assert shown.returncode == 0 and "held by ci on elsewhere" in shown.stdout
    assert "its lease ran out at" in shown.stdout and "the next run takes it over" in shown.stdout, shown.stdout
    as_json = json.loads(cli(project, "lock", "--json").stdout)
    assert as_json["held"] and as_json["holder"]["expired"] is True
    locks.update_one({"_id": "migration_lock"}, {"$set": {"expires_at": past + datetime.timedelta(days=1)}})
    assert json.loads(cli(project, "lock", "--json").stdout)["holder"]["expired"] is False
    assert "ran out" not in cli(project, "lock").stdout
