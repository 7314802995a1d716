"""The in-app runner: failed slices reach observers and ``on_error`` with their redacted error; bad options are refused."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import pytest

from mongoshift.api import background as bg, migrations as command
from mongoshift.background.state.events import Event
from mongoshift.errors import ConfigInvalidError, ExitCode
from mongoshift.project.settings import load_settings

from .conftest import background_file

NAME = "0001_step.py"

FAILING_STEP = """
from mongoshift import Background

def step(ctx):
    raise RuntimeError("cannot reach mongodb://app:hunter2@db.internal:27017/app")

background = Background(collection="people", from_version=0, to_version=1, step=step, pause_ms=0, max_slice_failures=100)
"""


async def test_failed_slices_reach_observers_with_their_redacted_error(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    fast_project.add(NAME, FAILING_STEP.replace("max_slice_failures=100", "max_slice_failures=2"))
    s = fast_project.settings()
    await command.up(s)
    events: list[Event] = []
    (result,) = await bg.run(s, [NAME], observers=[events.append])
    assert result.status == "failed"
    failed = [e for e in events if e.kind == "slice_end" and e.data["outcome"] == "error"]
    assert len(failed) == 2
    for event in failed:
        assert event.data["error"].startswith("RuntimeError: cannot reach mongodb://") and "db.internal" in event.data["error"]
        assert "hunter2" not in event.data["error"]


async def test_on_error_hears_of_failed_slices_and_the_runner_goes_on(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    fast_project.add(NAME, FAILING_STEP)
    s = fast_project.settings()
    await command.up(s)
    events: list[Event] = []
    errors: list[tuple[str | None, str]] = []

    def on_error(migration: str | None, message: str) -> None:
        errors.append((migration, message))
        raise ValueError("the application's callback is broken too")  # logged, and the runner goes on

    runner = await bg.start_background_runner(s, observers=[events.append], on_error=on_error)
    try:
        for _ in range(600):
            if len(errors) >= 2:
                break
            await asyncio.sleep(0.05)
        assert runner.running
    finally:
        await runner.stop()

    assert len(errors) >= 2, "on_error never heard of the failed slices"
    migration, message = errors[0]
    assert migration == NAME
    assert message.startswith("RuntimeError: cannot reach mongodb://") and "db.internal" in message
    assert "hunter2" not in message and "app:" not in message
    failed = [e for e in events if e.kind == "slice_end" and e.data["outcome"] == "error"]
    assert failed and all(e.data["error"] == message for e in failed)


async def _async_callback(*args: Any) -> None:
    return None


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": -2}, "concurrency"),
        ({"concurrency": 1.5}, "concurrency"),
        ({"concurrency": True}, "concurrency"),
        ({"concurrency": "2"}, "concurrency"),
        ({"concurrency": 65}, "concurrency"),
        ({"observers": print}, "observers"),
        ({"observers": [1]}, "observers"),
        ({"observers": [_async_callback]}, "observers"),
        ({"on_error": 1}, "on_error"),
        ({"on_error": _async_callback}, "on_error"),
        ({"client": "mongodb://localhost"}, "client"),
    ],
)
async def test_bad_runner_options_are_refused_when_it_is_built(fast_project, options: dict[str, Any], named: str) -> None:  # type: ignore[no-untyped-def]
    s = fast_project.settings()
    with pytest.raises(ConfigInvalidError, match=named) as refused:
        bg.BackgroundRunner(s, **options)
    assert refused.value.exit_code == ExitCode.CONFIG_INVALID
    with pytest.raises(ConfigInvalidError, match=named):
        await bg.start_background_runner(s, **options)
    if named == "concurrency":
        with pytest.raises(ConfigInvalidError, match=named):
            await bg.run(s, concurrency=options["concurrency"])
    with pytest.raises(ConfigInvalidError, match="settings"):
        bg.BackgroundRunner({"uri": "mongodb://localhost"})  # type: ignore[arg-type]


async def test_a_runner_that_cannot_connect_tells_on_error_and_keeps_trying(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """An application that starts while MongoDB is down: before, the runner's task died with the
    connection error, on_error heard nothing and only stop() raised it."""
    with socket.socket() as probe:  # a port nothing listens on: the connection is refused at once
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    flags = {"uri": f"mongodb://127.0.0.1:{port}/", "db": "down", "migrations_dir": str(tmp_path), "background_poll_seconds": 0.05}
    s = load_settings(flags, environ={}, env_file=False)
    errors: list[tuple[str | None, str]] = []
    tried_twice = asyncio.Event()

    def on_error(migration: str | None, message: str) -> None:
        errors.append((migration, message))
        if len(errors) >= 2:
            tried_twice.set()

    runner = await bg.start_background_runner(s, on_error=on_error)
    try:
        await asyncio.wait_for(tried_twice.wait(), 60)
        assert runner.running
    finally:
        await runner.stop()  # stopped while waiting to connect again: no error
    assert not runner.running
    assert all(migration is None and "connection refused" in message for migration, message in errors)


@pytest.mark.parametrize(
    "edit",
    [{"$set": {"totals.migrated": "SECRET-VALUE"}}, {"$set": {"generation": [1]}}, {"$unset": {"collection": ""}}],
    ids=["counter-as-text", "generation-as-array", "no-collection"],
)
def test_a_state_record_edited_by_hand_is_refused_naming_it_not_a_crash(fast_project, sync_client, cli, edit) -> None:  # type: ignore[no-untyped-def]
    """A background state whose counter was edited by hand into text made ``background status`` (and ``run``, ``up
    --force``...) exit 1, "unexpected ValueError, please report it" (found in a user trial). It is refused as a changelog
    record of the wrong type is: exit 39, naming the record and never its value, and audit still reports it."""
    db = sync_client[fast_project.db]
    db.people.insert_many([{"_id": i, "first": "a", "last": "b", "__v": 1} for i in range(3)])
    fast_project.add("0001_names.py", background_file())
    assert cli(fast_project, "up").returncode == 0
    db["_mongoshift_background"].update_one({"_id": "0001_names.py"}, edit)
    for args in (("background", "status"), ("background", "status", "0001_names"), ("background", "run", "0001_names")):
        done = cli(fast_project, *args, "--json")
        assert done.returncode == ExitCode.COLLECTION_CLASH, (args, done.stdout, done.stderr[-2000:])
        error = json.loads(done.stdout)["error"]
        assert error["kind"] == "collection_clash" and error["details"] == {"record": "0001_names.py"}
        assert "the state record of 0001_names.py is not one mongoshift writes" in error["message"]
        assert "SECRET" not in done.stdout + done.stderr
    audit = cli(fast_project, "audit", "--json")
    assert any(f["check"] == "background.no_state" for f in json.loads(audit.stdout)["findings"]), audit.stdout
