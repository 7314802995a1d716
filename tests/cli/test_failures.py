"""How failures end a command: the right exit code, one JSON document, the lock released."""

from __future__ import annotations

import json
import signal

import pytest

from ..conftest import fail_point_data, start_cli
from .test_cli import QUICK, SLOW, wait_for

LOCKS = "_mongoshift_locks"
CHANGELOG = "_mongoshift_migrations"


def records(sync_client, project) -> dict[str, dict]:  # type: ignore[no-untyped-def, type-arg]
    return {r["name"]: r for r in sync_client[project.db][CHANGELOG].find()}


def one_error(result) -> dict:  # type: ignore[no-untyped-def, type-arg]
    """stdout holds exactly one JSON document, an error; stderr no traceback."""
    assert "Traceback" not in result.stderr, result.stderr
    return json.loads(result.stdout)["error"]  # type: ignore[no-any-return]


# Works until the lock is gone (a fixed sleep raced the unlock command's start-up on a loaded machine).
UNTIL_UNLOCKED = """
import time

def up(ctx):
    ctx.db.marks.insert_one({"at": "start"})
    deadline = time.monotonic() + 120
    while ctx.db["_mongoshift_locks"].count_documents({}) and time.monotonic() < deadline:
        time.sleep(0.05)
    ctx.db.marks.insert_one({"at": "end"})
"""


def test_cleared_lock_fails_the_last_migration_with_exit_10(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """A body that never polls ctx.cancelled: the lock is cleared while it runs, it is not recorded applied."""
    project.write_config(lock_ttl_seconds=3)
    project.add("0001_slow.py", UNTIL_UNLOCKED)
    proc = start_cli(project, "up", "--json")
    wait_for(lambda: sync_client[project.db].marks.count_documents({}) == 1)
    assert cli(project, "unlock", "--yes").returncode == 0
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 10, err
    error = json.loads(out)["error"]
    assert error["kind"] == "lock_lost" and "0001_slow.py" in error["message"]
    assert records(sync_client, project)["0001_slow.py"]["status"] == "failed"


USER_EXITS = {
    "sync-exit-0": "import sys\ndef up(ctx):\n    ctx.db.marks.insert_one({'at': 'before'})\n    sys.exit(0)\n",
    "sync-exit-3": "import sys\ndef up(ctx):\n    sys.exit(3)\n",
    "async-exit-0": "import sys\nasync def up(ctx):\n    await ctx.db.marks.insert_one({'at': 'before'})\n    sys.exit(0)\n",
    "async-keyboard-interrupt": "async def up(ctx):\n    raise KeyboardInterrupt\n",
    "sync-keyboard-interrupt": "def up(ctx):\n    raise KeyboardInterrupt\n",
    "sync-transaction-exit-0": "import sys\nuse_transaction = True\ndef up(ctx):\n    sys.exit(0)\n",
    "async-transaction-exit-3": "import sys\nuse_transaction = True\nasync def up(ctx):\n    sys.exit(3)\n",
}


@pytest.mark.parametrize("source", list(USER_EXITS.values()), ids=list(USER_EXITS))
def test_sys_exit_or_keyboard_interrupt_in_a_migration_is_its_failure(project, sync_client, source: str, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_exits.py", source)
    project.add("0002_next.py", QUICK)
    result = cli(project, "up", "--json")
    assert result.returncode == 7, result.stderr
    error = one_error(result)
    assert error["kind"] == "execution_failed" and "0001_exits.py" in error["message"]
    found = records(sync_client, project)
    assert found["0001_exits.py"]["status"] == "failed"
    assert "0002_next.py" not in found
    assert sync_client[project.db][LOCKS].count_documents({}) == 0


@pytest.mark.parametrize("hook", ["before_each", "after_each"])
def test_sys_exit_in_a_hook_is_a_hook_failure(project, sync_client, tmp_path, hook: str, cli) -> None:  # type: ignore[no-untyped-def]
    args = "name, ctx, info" if hook == "before_each" else "name, duration_ms, ctx, info"
    hooks = tmp_path / "hooks_file.py"
    hooks.write_text(f"import sys\ndef {hook}({args}):\n    sys.exit(0)\n")
    project.write_config(hooks=str(hooks))
    project.add("0001_a.py", QUICK)
    result = cli(project, "up", "--json")
    assert result.returncode == 12, result.stderr
    assert one_error(result)["kind"] == "hook_failed"
    assert sync_client[project.db][LOCKS].count_documents({}) == 0


def test_sys_exit_while_the_hooks_module_imports_is_a_hook_failure(project, tmp_path, cli) -> None:  # type: ignore[no-untyped-def]
    hooks = tmp_path / "hooks_file.py"
    hooks.write_text("import sys\nsys.exit(0)\n")
    project.write_config(hooks=str(hooks))
    project.add("0001_a.py", QUICK)
    result = cli(project, "up", "--json")
    assert result.returncode == 12, result.stderr
    assert one_error(result)["kind"] == "hook_failed"


def fail_point(sync_client, mode, **data) -> None:  # type: ignore[no-untyped-def]
    command = {"configureFailPoint": "failCommand", "mode": mode}
    if data:
        command["data"] = fail_point_data(**data)
    sync_client.admin.command(command)


def cli_under_fail_point(cli, project, sync_client, args: list[str], mode, **data):  # type: ignore[no-untyped-def]
    """Run the CLI while the ``failCommand`` fail point is set (from this process: the CLI is another one)."""
    fail_point(sync_client, mode, **data)
    try:
        return cli(project, *args)
    finally:
        fail_point(sync_client, "off")


def test_migration_failure_is_not_masked_by_a_failed_lock_release(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_boom.py", "def up(ctx):\n    raise ValueError('no good')\n")
    result = cli_under_fail_point(cli, project, sync_client, ["up", "--json"], {"times": 1}, failCommands=["delete"], errorCode=2)  # the release
    assert result.returncode == 7, result.stderr
    error = one_error(result)
    assert error["kind"] == "execution_failed" and "no good" in error["message"]
    later = error["details"]["later_errors"]
    assert [e["kind"] for e in later] == ["lock_release_failed"]
    assert "lock" in result.stderr.split("error:")[0]  # the later failure is logged too


def test_failed_lock_release_alone_still_exits_21(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", QUICK)
    result = cli_under_fail_point(cli, project, sync_client, ["up", "--json"], {"times": 1}, failCommands=["delete"], errorCode=2)
    assert result.returncode == 21, result.stderr
    assert one_error(result)["kind"] == "lock_release_failed"


def test_server_error_while_taking_the_lock_is_one_json_error(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", QUICK)
    result = cli_under_fail_point(cli, project, sync_client, ["up", "--json"], {"times": 1}, failCommands=["update"], errorCode=2)
    assert result.returncode == 1, result.stderr
    error = one_error(result)
    assert error["kind"] == "server_error" and "code 2" in error["message"]
    assert records(sync_client, project) == {}


def test_lost_connection_while_taking_the_lock_exits_5(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """The server stops answering the lock's command (and its retry) past the socket timeout."""
    project.add("0001_a.py", QUICK)
    separator = "&" if "?" in project.uri else "?"
    uri = f"{project.uri}{separator}socketTimeoutMS=500"
    result = cli_under_fail_point(
        cli, project, sync_client, ["up", "--json", "--uri", uri], {"times": 2}, failCommands=["update"], blockConnection=True, blockTimeMS=2000
    )
    assert result.returncode == 5, result.stderr
    assert one_error(result)["kind"] == "connection_failed"


def test_a_migration_that_loses_the_connection_exits_5_and_is_recorded_failed(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """The server drops the body's insert (and its retry): the connection is lost, not the migration wrong (5,
    not 7); its failure is recorded, and nothing prints a traceback without -v."""
    project.add("0001_a.py", "def up(ctx):\n    ctx.db.marks.insert_one({'at': 1})\n")
    result = cli_under_fail_point(cli, project, sync_client, ["up", "--json"], {"times": 2}, failCommands=["insert"], closeConnection=True)
    assert result.returncode == 5, result.stderr
    error = one_error(result)
    assert error["kind"] == "connection_failed" and "lost while it ran" in error["message"]
    assert "Topology" not in error["message"] and "Traceback" not in result.stderr
    assert records(sync_client, project)["0001_a.py"]["status"] == "failed"


def test_server_error_shows_its_traceback_with_verbose(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", QUICK)
    result = cli_under_fail_point(cli, project, sync_client, ["up", "-v"], {"times": 1}, failCommands=["update"], errorCode=2)
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "BadValue" in result.stderr


def twice_interrupted(proc, marker: str = "mongoshift: stopping:") -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """SIGINT, then a second SIGINT once the first was handled (its line on stderr says so), not a fixed delay
    later: a loaded machine may not have delivered the first by then, and two pending SIGINTs are one signal.
    Returns the process's stdout and its whole stderr."""
    proc.send_signal(signal.SIGINT)
    said = []
    assert proc.stderr is not None
    for line in proc.stderr:  # until the first signal's line (the process's exit at the latest)
        said.append(line)
        if marker in line:
            break
    assert said and marker in said[-1], "".join(said)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return out, "".join(said) + err


def test_a_real_second_ctrl_c_still_stops_at_once_with_130(project, sync_client) -> None:  # type: ignore[no-untyped-def]
    """Only user code's own SystemExit/KeyboardInterrupt became failures: real signals keep their meaning."""
    project.add("0001_slow.py", SLOW.format(name="slow", seconds=30))
    proc = start_cli(project, "up", "--json")
    wait_for(lambda: sync_client[project.db].marks.count_documents({}) == 1)
    out, err = twice_interrupted(proc)
    assert proc.returncode == 130, err
    error = json.loads(out)["error"]  # one JSON document, even here
    assert error["code"] == 130 and error["kind"] == "second_signal"
    assert "'mongoshift unlock' clears it" in error["message"]  # what is left behind, and the way out


def test_a_second_ctrl_c_says_the_next_run_here_takes_the_lock_over(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """The second signal's message said the lock stays held until its time-to-live runs out or 'unlock' clears
    it, which sent the reader to wait a minute or to unlock by hand: the next run on this host takes it over at
    once (its holder is gone), and says so."""
    project.add("0001_slow.py", SLOW.format(name="slow", seconds=30))
    proc = start_cli(project, "up", "--json")
    wait_for(lambda: sync_client[project.db].marks.count_documents({}) == 1)
    out, err = twice_interrupted(proc)
    assert proc.returncode == 130, err
    message = json.loads(out)["error"]["message"]
    assert "the next run on this host takes it over at once" in message, message
    assert "'mongoshift unlock' clears it" in message and "lock_ttl_seconds" in message  # the way out elsewhere
    project.add("0001_slow.py", QUICK)  # never recorded: the next run runs it again
    again = cli(project, "up")
    assert again.returncode == 0, again.stderr
    assert "took over the lock" in again.stderr


SLOW_BACKGROUND = """
import time
from mongoshift import Background

def migrate(doc, ctx):
    time.sleep(0.05)
    doc["done"] = True
    return doc

background = Background(collection="slow", from_version=0, to_version=1, migrate=migrate, batch_size=5, adaptive=False)
"""


def test_a_second_ctrl_c_in_background_run_says_what_a_run_leaves_behind(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """``background run`` holds leases, not the line's lock, and records nothing an ``up`` would run again:
    its second signal said the line's words ("the next 'up'"), which sent the reader the wrong way."""
    sync_client[project.db].slow.insert_many([{"_id": i} for i in range(400)])
    project.add("0001_slow.py", SLOW_BACKGROUND)
    assert cli(project, "up").returncode == 0
    proc = start_cli(project, "background", "run", "0001_slow", "--json")
    wait_for(lambda: sync_client[project.db].slow.count_documents({"__v": 1}) >= 5)
    out, err = twice_interrupted(proc)
    assert proc.returncode == 130, err
    message = json.loads(out)["error"]["message"]
    assert "'mongoshift background unlock NAME' clears them now" in message and "background_lease_ttl_seconds" in message
    assert "'up'" not in message and "lock_ttl_seconds" not in message


def test_ctrl_c_under_log_format_json_keeps_every_stderr_line_one_json_object(project, sync_client) -> None:  # type: ignore[no-untyped-def]
    """The signal's own lines ("stopping", "second signal") are JSON lines too, with no blank line before
    them: a log collector reading ``--log-format json`` parses every line."""
    project.add("0001_slow.py", SLOW.format(name="slow", seconds=30))
    proc = start_cli(project, "up", "--log-format", "json")
    wait_for(lambda: sync_client[project.db].marks.count_documents({}) == 1)
    _, err = twice_interrupted(proc, "stopping:")
    lines = err.splitlines()
    assert proc.returncode == 130, lines
    parsed = [json.loads(line) for line in lines]  # every line, none blank
    messages = [line["message"] for line in parsed if line["level"] == "warning"]
    assert any(m.startswith("stopping: nothing new starts and ctx.cancelled is set") for m in messages), messages
    assert any(m.startswith("second signal, stopping now: a lock this run held stays held") for m in messages), messages


@pytest.mark.parametrize(
    ("args", "line"), [(("up",), True), (("down",), True), (("redo",), True), (("lint",), False), (("converge",), False), (("status",), False)]
)
def test_the_first_stop_speaks_of_ctx_cancelled_only_where_a_migration_runs(project, cli, monkeypatch, args, line: bool) -> None:  # type: ignore[no-untyped-def]
    """``lint`` and ``converge`` said "ctx.cancelled is set" on their first Ctrl-C: words of the migration line."""
    from mongoshift.cli import app, converge, lint, main

    said: list[str] = []

    def recorded(make, *, stopping: str = app.STOPPING, left_behind: str = app.LEFT_BEHIND):  # type: ignore[no-untyped-def]
        said.append(stopping)
        raise SystemExit(0)

    for module in (main, lint, converge):
        monkeypatch.setattr(module, "run_async", recorded)
    project.add("0001_a.py", "def up(ctx):\n    pass\n\n\ndef down(ctx):\n    pass\n")
    cli(project, *args, "--yes") if args == ("converge",) else cli(project, *args)
    assert said, args
    assert ("ctx.cancelled" in said[0]) is line, said


def test_a_second_ctrl_c_in_converge_says_what_converge_leaves(project, cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``converge``'s second signal said "a migration that was running is not recorded": no migration runs there."""
    from mongoshift.cli import app, converge

    said: list[str] = []

    def recorded(make, *, stopping: str = app.STOPPING, left_behind: str = app.LEFT_BEHIND):  # type: ignore[no-untyped-def]
        said.append(left_behind)
        raise SystemExit(0)

    monkeypatch.setattr(converge, "run_async", recorded)
    cli(project, "converge", "--yes")
    assert len(said) == 1 and "migration" not in said[0], said
    assert "'mongoshift unlock' clears it" in said[0] and "'mongoshift converge --check'" in said[0]


@pytest.mark.parametrize(
    "args",
    [
        ("up",),
        ("down",),
        ("redo",),
        ("status",),
        ("list",),
        ("dry-run", "up"),
        ("baseline", "--to", "0002_c", "--yes"),
        ("background", "dry-run", "0001_a"),
    ],
    ids=" ".join,
)
def test_two_files_with_one_version_are_refused_by_every_command(project, sync_client, args: tuple[str, ...], cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", QUICK)
    project.add("0001_b.py", QUICK)
    project.add("0002_c.py", QUICK)
    result = cli(project, *args, "--json")
    assert result.returncode == 43, result.stderr
    error = one_error(result)
    assert error["kind"] == "duplicate_version" and error["details"]["files"] == ["0001_a.py", "0001_b.py"]
    assert "0001_a.py and 0001_b.py" in error["message"]
    assert sync_client[project.db].list_collection_names() == []  # refused before anything ran or was recorded


STOPPED_DOWN = """
import pathlib
import time

_here = pathlib.Path(__file__).resolve().parent.parent


def up(ctx):
    pass


def down(ctx):
    (_here / "reverting").write_text("")
    for _ in range(2400):  # until the test has sent its signal (at most two minutes); never looks at ctx.cancelled
        if (_here / "go").exists():
            break
        time.sleep(0.05)
"""


def test_a_redo_stopped_after_its_rollback_names_the_up_it_did_not_start(project, cli) -> None:  # type: ignore[no-untyped-def]
    """Ctrl-C during a redo's rollback: the file is recorded reverted and its ``up`` never starts. The error said
    only "1 migration completed, the rest were not started", leaving the reader to find out that the file is now
    rolled back: it names what was not started, with its direction."""
    from ..conftest import interrupt_at

    project.add("0001_a.py", STOPPED_DOWN)
    assert cli(project, "up").returncode == 0
    process = start_cli(project, "redo")
    stderr = interrupt_at(process, project.root / "reverting", project.root / "go")
    assert process.returncode == 11, stderr
    assert "the rest were not started: 0001_a.py (up)" in stderr, stderr
    status = json.loads(cli(project, "status", "--json").stdout)["migrations"]
    assert [(m["name"], m["state"]) for m in status] == [("0001_a.py", "reverted")]


TRANSACTIONAL_MARK = """
use_transaction = True


async def up(ctx):
    await ctx.db.marks.insert_one({"attempt": ctx.attempt}, session=ctx.session)
"""


def test_a_retried_transaction_says_so_without_verbose(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """A transient error (a write conflict with a transaction a killed run left open) makes the driver run the
    body again, for up to two minutes: the next ``up`` after a kill -9 sat a minute without a word. The first
    retry is said once, at info level."""
    project.add("0001_tx.py", TRANSACTIONAL_MARK)
    result = cli_under_fail_point(
        cli, project, sync_client, ["up"], {"times": 1}, failCommands=["insert"], errorCode=112, errorLabels=["TransientTransactionError"]
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("its transaction runs again after a transient error") == 1, result.stderr
    assert [d["attempt"] for d in sync_client[project.db].marks.find()] == [2]


@pytest.mark.parametrize(
    ("args", "lock"),
    [
        (("background", "dry-run", "0002_bg", "--first", "1"), False),
        (("background", "status"), False),
        (("background", "verify"), False),
        (("background", "pause", "0002_bg"), False),
        (("background", "resume", "0002_bg"), False),
        (("background", "cancel", "0002_bg", "--yes"), False),
        (("background", "retry", "0002_bg", "--yes"), False),
        (("background", "repin", "0002_bg", "--yes"), False),
        (("background", "unlock", "0002_bg", "--yes"), False),
        (("background", "throttle", "0002_bg", "--batch-size", "10"), False),
        (("up",), True),
    ],
)
def test_a_second_stop_speaks_of_a_lock_only_where_the_command_holds_one(project, cli, monkeypatch, args, lock: bool) -> None:  # type: ignore[no-untyped-def]
    """A second Ctrl-C of ``background dry-run`` said "a lock this run held stays held ... a migration that was running
    is not recorded": a preview takes no lock and runs no migration (docs/background.md, "Before you run"). The
    controls (pause ... throttle) said it too: they hold no lock either, and make one change of a migration's state."""
    from mongoshift.cli import app, background, main

    said: list[str] = []

    def recorded(make, *, stopping: str = app.STOPPING, left_behind: str = app.LEFT_BEHIND):  # type: ignore[no-untyped-def]
        said.append(left_behind)
        raise SystemExit(0)

    for module in (main, background):
        monkeypatch.setattr(module, "run_async", recorded)
    project.add("0001_a.py", "def up(ctx):\n    pass\n")
    project.add(
        "0002_bg.py",
        "from mongoshift import Background\n\n\ndef migrate(doc, ctx):\n    return doc\n\n\n"
        "background = Background(collection='people', from_version=0, to_version=1, migrate=migrate)\n",
    )
    cli(project, *args)
    assert said, args
    assert ("lock this run held" in said[0]) is lock, said
    assert ("not recorded" in said[0]) is lock, said


# Its own real Ctrl-C (a first one: the run stops at this migration's end, exit 11), and a second one from an
# exit handler: it comes once the outcome is decided, printed and the process is ending (the driver closing
# its connections), as a second Ctrl-C pressed a moment late does.
CTRL_C_AT_THE_EXIT = """
import atexit, os, signal

def up(ctx):
    atexit.register(os.kill, os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGINT)
    ctx.cancelled.wait()
"""


def test_a_second_ctrl_c_while_the_process_ends_keeps_the_exit_code_it_printed(project, sync_client) -> None:  # type: ignore[no-untyped-def]
    """A second Ctrl-C that came after the run's outcome was printed, while the interpreter was exiting,
    printed a KeyboardInterrupt traceback of the driver's shutdown, or ended the process by the signal
    (130 in a shell) although the JSON document on stdout said 11: now the process ends with its code."""
    project.add("0001_a.py", CTRL_C_AT_THE_EXIT)
    proc = start_cli(project, "up", "--json")
    stdout, stderr = proc.communicate(timeout=120)
    error = json.loads(stdout)["error"]
    assert error["code"] == 11 and error["kind"] == "aborted", stdout
    assert proc.returncode == 11, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert records(sync_client, project)["0001_a.py"]["status"] == "failed"
