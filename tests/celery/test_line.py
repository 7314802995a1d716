"""The migration line through a real Celery worker and Redis: order, blocking, duplicates, run ids."""

from __future__ import annotations

import pytest

from mongoshift.celery import LineResult
from mongoshift.errors import MigrationTimeoutError

from ..background.conftest import background_file

pytestmark = pytest.mark.celery

STEP = '''
def up(ctx):
    # how many steps ran before this one: its place in the line, whatever the clocks say
    ctx.db.steps.insert_one({{"name": "{name}", "after": ctx.db.steps.count_documents({{}})}})
'''

FAILING = '''
def up(ctx):
    raise RuntimeError("cannot reach mongodb://admin:hunter2@db.internal:27017 today")
'''


def add_line(project, failing: int | None = None) -> list[str]:  # type: ignore[no-untyped-def]
    names = []
    for i in range(1, 6):
        name = f"2026010100000{i}_step_{i}.py"
        project.add(name, FAILING if i == failing else STEP.format(name=name))
        names.append(name)
    return names


def applied(sync_client, project) -> dict[str, dict]:  # type: ignore[no-untyped-def]
    return {r["name"]: r for r in sync_client[project.db]["_mongoshift_migrations"].find({"status": "applied"})}


def test_an_up_of_five_applies_them_in_order_once(redis_harness, project, sync_client) -> None:  # type: ignore[no-untyped-def]
    names = add_line(project)
    redis_harness.worker("-P", "prefork", "-c", "2")  # two tasks at a time: the order is kept by the line, not the pool
    line = redis_harness.tasks.enqueue_up()
    assert line.names == names and line.dropped == [] and line.batch == 1
    results = line.wait(timeout=90)
    assert [r.outcome for r in results] == ["applied"] * 5, [r.error for r in results]
    assert [r.name for r in results] == names
    steps = [d["name"] for d in sync_client[project.db].steps.find().sort("after", 1)]
    assert steps == names  # each ran once, in name order
    assert [d["after"] for d in sync_client[project.db].steps.find().sort("after", 1)] == [0, 1, 2, 3, 4]
    records = applied(sync_client, project)
    assert {records[n]["batch"] for n in names} == {1}  # one batch: one rollback unit
    assert all(r.run_id and r.run_id == records[r.name]["run_id"] for r in results)  # the run id of the record
    assert all(isinstance(r, LineResult) and r.group == line.group for r in results)
    ended = [(migration, run_id) for kind, migration, run_id in redis_harness.events() if kind == "migration_end"]
    assert sorted(ended) == sorted((r.name, r.run_id) for r in results)  # the observers given to register() saw each run


def test_a_failing_third_blocks_the_fourth_and_fifth(redis_harness, project, sync_client) -> None:  # type: ignore[no-untyped-def]
    names = add_line(project, failing=3)
    redis_harness.worker("-P", "prefork", "-c", "2")
    results = redis_harness.tasks.enqueue_up().wait(timeout=90)
    assert [r.outcome for r in results] == ["applied", "applied", "failed", "blocked", "blocked"], [r.error for r in results]
    failed, fourth, fifth = results[2], results[3], results[4]
    assert failed.code == 7 and failed.kind == "execution_failed" and failed.run_id
    assert "hunter2" not in (failed.error or "") and "RuntimeError" in (failed.error or "")  # redacted, still useful
    assert names[2] in fourth.blocked_by and fourth.kind == "blocked" and f"{names[2]} did not apply" in (fourth.error or "")
    assert names[2] in fifth.blocked_by
    assert sorted(applied(sync_client, project)) == names[:2]
    assert sorted(d["name"] for d in sync_client[project.db].steps.find()) == names[:2]
    # the failed one stays failed; the broker's copy of the intent holds nobody after the fix
    project.add(names[2], STEP.format(name=names[2]))
    again = redis_harness.tasks.enqueue_up()
    assert again.names == names[2:] and again.dropped == []
    assert [r.outcome for r in again.wait(timeout=90)] == ["applied"] * 3


def test_enqueuing_twice_runs_once(redis_harness, project, sync_client) -> None:  # type: ignore[no-untyped-def]
    names = add_line(project)
    first = redis_harness.tasks.enqueue_up()  # queued before any worker runs: all five intents live
    second = redis_harness.tasks.enqueue_up()
    assert first.names == names
    assert second.names == [] and second.dropped == names and second.wait() == []
    with pytest.raises(MigrationTimeoutError) as late:  # no worker yet: the bound names what is still queued
        first.wait(timeout=0.5)
    assert late.value.exit_code == 14 and late.value.details["unfinished"] == names
    redis_harness.worker("-P", "solo")
    assert [r.outcome for r in first.wait(timeout=90)] == ["applied"] * 5
    assert [d["name"] for d in sync_client[project.db].steps.find().sort("after", 1)] == names
    # a message delivered twice (a broker redelivery) finds the migration applied: skipped, not run
    payload = {"v": 1, "name": names[0], "group": first.group, "batch": 1, "wait_until": 4e9}
    replay = redis_harness.tasks.up.apply_async(args=(payload,))
    assert LineResult.of(replay.get(timeout=60)).outcome == "skipped"
    assert sync_client[project.db].steps.count_documents({}) == 5
    assert redis_harness.tasks.enqueue_up().names == []  # nothing pending


def test_a_payload_of_an_unknown_version_is_refused_not_run(redis_harness, project, sync_client) -> None:  # type: ignore[no-untyped-def]
    add_line(project)
    redis_harness.worker("-P", "solo")
    bad = redis_harness.tasks.up.apply_async(args=({"v": 3, "name": "x.py"},))
    with pytest.raises(Exception) as caught:
        bad.get(timeout=60)
    assert "payload version 3" in str(caught.value)
    unknown = redis_harness.tasks.up.apply_async(args=({"v": 1, "name": "x.py", "group": "g", "batch": 1, "wait_until": 1, "extra": 1},))
    with pytest.raises(Exception) as caught:
        unknown.get(timeout=60)
    assert "extra: extra_forbidden" in str(caught.value)
    assert sync_client[project.db].steps.count_documents({}) == 0


async def test_a_group_the_broker_refuses_leaves_no_intent_behind(project, client) -> None:  # type: ignore[no-untyped-def]
    from celery import Celery

    from mongoshift import api
    from mongoshift.celery import register

    names = add_line(project)
    app = Celery("nowhere", broker="redis://127.0.0.1:1/0", set_as_current=False)  # nothing listens on port 1
    app.conf.update(task_publish_retry=False, broker_connection_retry=False, broker_connection_max_retries=0, broker_connection_timeout=1)
    tasks = register(app, settings=project.config)
    with pytest.raises(Exception):  # noqa: B017 - the broker's own error (kombu's OperationalError), whichever transport
        await tasks.aenqueue_up(client=client)
    held = await api.read_intents(project.settings(), [f"up:{n}" for n in names], client=client)
    assert held == {}  # released: the next enqueue is not dropped as a duplicate
    project.add("20260101000009_names.py", background_file())
    await api.up(project.settings(), client=client)  # registers it: start_background refuses a name up never registered (9)
    with pytest.raises(Exception):  # noqa: B017 - the broker's own error, as above
        tasks.start_background("20260101000009_names")
    assert await api.read_intents(project.settings(), ["background:20260101000009_names.py"], client=client) == {}


HANGS = '''
import os
import time

def up(ctx):
    with open({path!r}, "w") as out:
        out.write(str(os.getpid()))
    while True:  # until its process is killed
        time.sleep(0.1)
'''


def test_a_pool_child_killed_in_a_body_blocks_the_tasks_behind_it_at_once(redis_harness, project, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A pool child killed in a body (kill -9, the OOM killer) left its task's intent ``running``: its message is not
    redelivered, yet the tasks behind it waited for it until intent_ttl_seconds had passed (an hour by default), and
    ``wait()`` with them. The worker's main process, which saw the child die, settles the intent: they end blocked now."""
    import asyncio
    import os
    import signal

    from mongoshift import api

    from .conftest import until

    names = add_line(project)
    for name in names[2:]:
        (project.migrations / name).unlink()
    names = names[:2]
    pid_file = tmp_path / "body.pid"
    project.add(names[0], HANGS.format(path=str(pid_file)))
    redis_harness.worker("-P", "prefork", "-c", "2")
    line = redis_harness.tasks.enqueue_up()
    until(lambda: pid_file.exists() and pid_file.read_text().strip() != "", 60, "the first body started", redis_harness)
    os.kill(int(pid_file.read_text()), signal.SIGKILL)

    first, second = line.wait(timeout=60)  # the intents' TTL here is 300 s, the line's wait 120 s

    assert (first.outcome, first.code, first.kind) == ("failed", 11, "aborted"), first
    assert (second.outcome, second.kind, second.blocked_by) == ("blocked", "blocked", [names[0]]), second
    assert f"{names[0]} did not apply" in (second.error or ""), second.error
    intent = asyncio.run(api.read_intents(project.settings(), [f"up:{names[0]}"]))[f"up:{names[0]}"]
    assert (intent.state, intent.data.get("kind")) == ("failed", "aborted")  # a failed intent does not hold the migration
