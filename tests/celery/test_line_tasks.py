"""The line's tasks beyond a plain ``up`` (issue 24 item 23): a lock that never frees, a file changed
after it was queued, a converge that waits for the lock, ``up --to``, one file, ``down`` and ``redo``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mongoshift import api
from mongoshift.celery import LineOptions, LineResult
from mongoshift.celery.line import plan_line, run_up

from .conftest import until

STEP = '''
def up(ctx):
    ctx.db.steps.insert_one({{"name": "{name}"}})

def down(ctx):
    ctx.db.steps.delete_many({{"name": "{name}"}})
'''

NAMES = [f"2026010100000{i}_step_{i}.py" for i in range(1, 4)]
OPTIONS = LineOptions(lock_wait_seconds=0.2, poll_seconds=0.2, line_wait_seconds=60.0, intent_ttl_seconds=60.0)


def add_three(project) -> None:  # type: ignore[no-untyped-def]
    for name in NAMES:
        project.add(name, STEP.format(name=name))


async def hold_the_lock(db, seconds: float) -> None:  # type: ignore[no-untyped-def]
    held = {"_id": "migration_lock", "owner": "other", "nonce": "n", "host": "h", "pid": 1, "executed_by": "x", "ttl_ms": int(seconds * 1000)}
    await db["_mongoshift_locks"].insert_one({**held, "expires_at": datetime.now(UTC) + timedelta(seconds=seconds)})


async def test_a_task_whose_lock_never_frees_is_failed_not_blocked(project, db, client) -> None:  # type: ignore[no-untyped-def]
    add_three(project)
    settings = project.settings()
    planned = await plan_line(settings, OPTIONS, client=client)
    payload, task_id = planned.tasks[0]
    await hold_the_lock(db, 3600)

    outcome = await run_up(settings, payload.model_copy(update={"wait_until": 1.0}), task_id, OPTIONS)  # its wait is over

    assert isinstance(outcome, LineResult)
    assert (outcome.outcome, outcome.code, outcome.kind) == ("failed", 3, "lock_held"), outcome
    assert "lock stayed held" in (outcome.error or "") and outcome.blocked_by == []
    intent = (await api.read_intents(settings, [f"up:{NAMES[0]}"], client=client))[f"up:{NAMES[0]}"]
    assert intent.state == "failed"  # the tasks behind it end blocked by it


async def test_a_task_that_cannot_reach_the_server_says_so_and_waits(project, client, caplog) -> None:  # type: ignore[no-untyped-def]
    """A worker that could not reach MongoDB re-sent its task every poll for up to line_wait_seconds without a word: at
    the default log level nothing showed why the line did not move. Each try is a warning, redacted."""
    add_three(project)
    settings = project.settings()
    planned = await plan_line(settings, OPTIONS, client=client)
    payload, task_id = planned.tasks[0]
    unreachable = settings.model_copy(update={"uri": "mongodb://bob:hunter2@127.0.0.1:1/?directConnection=true", "connect_timeout_seconds": 0.5})

    with caplog.at_level("WARNING", logger="mongoshift.celery"):
        outcome = await run_up(unreachable, payload, task_id, OPTIONS)

    assert not isinstance(outcome, LineResult) and outcome.countdown == OPTIONS.poll_seconds  # a wait, nothing ran
    (line,) = [r.getMessage() for r in caplog.records if r.name == "mongoshift.celery"]
    assert line.startswith(f"{NAMES[0]}: not run, cannot reach MongoDB at 127.0.0.1:1") and "tries again in 0.2s" in line
    assert "hunter2" not in line and "bob" not in line


async def test_a_file_changed_after_it_was_queued_is_refused_not_run(project, db, client) -> None:  # type: ignore[no-untyped-def]
    add_three(project)
    settings = project.settings()
    planned = await plan_line(settings, OPTIONS, client=client)
    payload, task_id = planned.tasks[0]
    assert payload.v == 2 and payload.checksum is not None
    project.add(NAMES[0], STEP.format(name="a later version") + "\n# edited after the deploy queued it\n")

    outcome = await run_up(settings, payload, task_id, OPTIONS)

    assert isinstance(outcome, LineResult)
    assert (outcome.outcome, outcome.code, outcome.kind) == ("failed", 4, "checksum_mismatch"), outcome
    assert "changed since it was queued" in (outcome.error or "")
    assert await db.steps.count_documents({}) == 0
    assert await db["_mongoshift_migrations"].count_documents({"status": "applied"}) == 0


@pytest.mark.celery
async def test_a_converge_task_waits_for_a_held_lock_as_the_line_does(redis_harness, project, db) -> None:  # type: ignore[no-untyped-def]
    await hold_the_lock(db, 3)  # another run holds it for a few seconds more
    redis_harness.worker("-P", "solo")

    result = redis_harness.tasks.enqueue_converge()

    report = result.get(timeout=90)
    assert report.get("success") is not False, report
    assert await db["_mongoshift_locks"].count_documents({"_id": "migration_lock"}) == 0


def _outcomes(results: list[LineResult]) -> list[tuple[str, str, str]]:
    return [(r.name, r.direction, r.outcome) for r in results]


@pytest.mark.celery
def test_up_to_one_file_down_and_redo_are_tasks_too(redis_harness, project, sync_client) -> None:  # type: ignore[no-untyped-def]
    add_three(project)
    tasks = redis_harness.tasks
    redis_harness.worker("-P", "solo")
    steps = sync_client[project.db].steps

    def applied() -> list[str]:
        return sorted(r["name"] for r in sync_client[project.db]["_mongoshift_migrations"].find({"status": "applied"}))

    first = tasks.enqueue_up(to=NAMES[1])  # up --to: the first two, in order
    assert _outcomes(first.wait(timeout=90)) == [(NAMES[0], "up", "applied"), (NAMES[1], "up", "applied")]

    back = tasks.enqueue_down()  # the last batch, newest first
    assert back.names == [NAMES[1], NAMES[0]] and back.batch == first.batch
    assert _outcomes(back.wait(timeout=90)) == [(NAMES[1], "down", "reverted"), (NAMES[0], "down", "reverted")]
    assert applied() == [] and steps.count_documents({}) == 0

    single = tasks.enqueue_up(NAMES[2])  # one file on its own: the earlier pending ones do not hold it
    assert _outcomes(single.wait(timeout=90)) == [(NAMES[2], "up", "applied")]
    assert applied() == [NAMES[2]]

    redo = tasks.enqueue_redo()  # the newest applied
    [redone] = redo.wait(timeout=90)
    assert (redone.name, redone.direction, redone.outcome) == (NAMES[2], "redo", "applied") and redone.run_id
    assert applied() == [NAMES[2]] and steps.count_documents({"name": NAMES[2]}) == 1
    # the batch the redo recorded, as status shows it (it said the batch the migration had been in)
    recorded = sync_client[project.db]["_mongoshift_migrations"].find_one({"name": NAMES[2]})["batch"]
    assert redone.batch == recorded and recorded != redo.batch

    payload: dict[str, Any] = {"v": 2, "name": NAMES[2], "group": "g", "batch": 1, "wait_until": 4e9, "direction": "down", "checksum": "0" * 64}
    wrong = tasks.up.apply_async(args=(payload,))  # a rollback's payload sent to the up task
    with pytest.raises(Exception, match="belongs to another task"):
        wrong.get(timeout=60)
    until(lambda: applied() == [NAMES[2]], 5, "nothing ran", redis_harness)


WAITS_FOR_CANCEL = '''
import time

def up(ctx):
    ctx.db.started.insert_one({"name": "slow"})
    deadline = time.monotonic() + 120  # a bound, not a timing: the revocation ends it long before
    while not ctx.cancelled.is_set() and time.monotonic() < deadline:
        time.sleep(0.05)
    raise RuntimeError(f"stopped: {ctx.cancelled.reason}")
'''


@pytest.mark.celery
def test_revoking_a_running_task_sets_ctx_cancelled(redis_harness, project, sync_client) -> None:  # type: ignore[no-untyped-def]
    project.add(NAMES[0], WAITS_FOR_CANCEL)
    project.add(NAMES[1], STEP.format(name=NAMES[1]))
    redis_harness.worker("-P", "solo")  # the task runs in the process that would read Celery's revoke: it cannot
    line = redis_harness.tasks.enqueue_up()
    until(lambda: sync_client[project.db].started.count_documents({}) == 1, 60, "the first body started", redis_harness)

    assert redis_harness.tasks.revoke(line) == NAMES[:2]  # neither had ended

    first, second = line.wait(timeout=90)
    assert first.outcome == "failed" and "stopped: the task was revoked" in (first.error or ""), first
    assert (second.outcome, second.kind, second.code) == ("failed", "aborted", 11), second  # queued behind it: never run
    assert sync_client[project.db].steps.count_documents({}) == 0
    records = {r["name"]: r["status"] for r in sync_client[project.db]["_mongoshift_migrations"].find()}
    assert records == {NAMES[0]: "failed"}


async def test_a_revoked_intent_is_not_made_live_again_by_its_task(project, client) -> None:  # type: ignore[no-untyped-def]
    settings = project.settings()
    assert await api.claim_intents(settings, [api.Claim("up:a.py", "task-1", 60)], client=client) == [True]
    assert await api.settle_intent(settings, "up:a.py", "task-1", "revoked", ttl_seconds=60, client=client)
    assert not await api.settle_intent(settings, "up:a.py", "task-1", "running", ttl_seconds=60, client=client)
    intent = (await api.read_intents(settings, ["up:a.py"], client=client))["up:a.py"]
    assert (intent.state, intent.live) == ("revoked", False)
    assert await api.settle_intent(settings, "up:a.py", "task-1", "failed", ttl_seconds=60, client=client)  # it may still end


def _active(harness) -> set[str]:  # type: ignore[no-untyped-def]
    replies = harness.app.control.inspect(timeout=1.0).active() or {}
    return {task["id"] for tasks in replies.values() for task in tasks}


@pytest.mark.celery
def test_celerys_own_revoke_reaches_a_running_task_on_a_threads_pool(redis_harness, project, sync_client) -> None:  # type: ignore[no-untyped-def]
    project.add(NAMES[0], WAITS_FOR_CANCEL)
    redis_harness.worker("-P", "threads", "-c", "2")  # its consumer reads control messages while the task runs
    line = redis_harness.tasks.enqueue_up()
    until(lambda: sync_client[project.db].started.count_documents({}) == 1, 60, "the body started", redis_harness)
    # and the worker counts it active: a revoke it receives before that marks the result revoked at once
    until(lambda: line.task_ids[0] in _active(redis_harness), 60, "the worker lists the task as active", redis_harness)

    redis_harness.app.control.revoke(line.task_ids)

    [first] = line.wait(timeout=90)
    assert first.outcome == "failed" and "stopped: the task was revoked" in (first.error or ""), first


@pytest.mark.celery
def test_another_worker_told_of_a_revoke_leaves_a_running_tasks_result_alone(redis_harness, project, sync_client) -> None:  # type: ignore[no-untyped-def]
    """Celery broadcasts a revoke to every worker of the broker; one that is not running the task marks it
    revoked in the result backend if it reads PENDING there. mongoshift's tasks track STARTED, so it does not."""
    import uuid

    from .conftest import Worker, forget_redis_queue

    project.add(NAMES[0], WAITS_FOR_CANCEL)
    redis_harness.worker("-P", "solo")  # runs the task, and cannot read control messages meanwhile
    elsewhere = f"ms-{uuid.uuid4().hex[:10]}"
    bystander = Worker({**redis_harness.env, "MS_CELERY_QUEUE": elsewhere}, redis_harness.tmp_path / "bystander.log", ["-P", "solo"])
    redis_harness.workers.append(bystander)
    try:
        line = redis_harness.tasks.enqueue_up()
        until(lambda: sync_client[project.db].started.count_documents({}) == 1, 60, "the body started", redis_harness)
        # A broadcast reaches only the workers already listening: the bystander answers a ping first.
        ping = redis_harness.app.control.ping
        until(lambda: bool(ping(destination=[bystander.name], timeout=0.5)), 60, "the bystander answered a ping", redis_harness)
        redis_harness.app.control.revoke(line.task_ids)  # Celery's own: only the bystander reads it now
        until(lambda: "flagged as revoked" in bystander.tail(), 60, "the bystander told of the revoke", redis_harness)
        assert redis_harness.app.AsyncResult(line.task_ids[0]).state == "STARTED"

        redis_harness.tasks.revoke(line)  # mongoshift's: the body sees it and stops
        [first] = line.wait(timeout=90)
        assert first.outcome == "failed" and "stopped: the task was revoked" in (first.error or ""), first
    finally:
        forget_redis_queue(elsewhere)


async def test_a_task_whose_credentials_are_refused_fails_at_once(project, client, caplog) -> None:  # type: ignore[no-untyped-def]
    """Refused credentials were waited out as a server out of reach: the task re-sent itself every poll for up to
    line_wait_seconds (an hour by default) before the producer learnt "auth_failed". They stay refused until a person
    acts: the task fails at once with exit 35, redacted."""
    add_three(project)
    settings = project.settings()
    if "@" in settings.uri:
        pytest.skip("the test server's URI carries credentials of its own")
    planned = await plan_line(settings, OPTIONS, client=client)
    payload, task_id = planned.tasks[0]
    refused = settings.model_copy(update={"uri": settings.uri.replace("mongodb://", "mongodb://bob:hunter2@", 1)})

    with caplog.at_level("WARNING", logger="mongoshift.celery"):
        outcome = await run_up(refused, payload, task_id, OPTIONS)  # its wait (line_wait_seconds) is far from over

    assert isinstance(outcome, LineResult), outcome
    assert (outcome.outcome, outcome.code, outcome.kind) == ("failed", 35, "auth_failed"), outcome
    assert "hunter2" not in (outcome.error or "") and "bob" not in (outcome.error or "")
    assert not [r for r in caplog.records if r.name == "mongoshift.celery" and "tries again" in r.getMessage()]
