"""Converge as a task, ``background verify`` and ``audit`` as periodic tasks, and the beat schedule helper."""

from __future__ import annotations

import pytest
from celery import Celery

from mongoshift import api
from mongoshift.celery import register
from mongoshift.errors import ConfigInvalidError

from ..background.conftest import background_file, seed


@pytest.mark.celery
async def test_converge_verify_and_audit_run_as_tasks(redis_harness, project, db, sync_client) -> None:  # type: ignore[no-untyped-def]
    (project.root / "collections").mkdir()
    (project.root / "collections" / "users.toml").write_text('indexes = [{ keys = { email = 1 }, unique = true }]\n')
    await seed(db.people, 30)
    project.add("20260101000001_names.py", background_file(batch_size=10))
    await api.up(project.settings())
    await api.run_background(project.settings())  # completed, so verify has something to look at
    redis_harness.worker("-P", "solo")
    tasks = redis_harness.tasks

    converged = tasks.enqueue_converge().get(timeout=60)
    assert converged["success"] is True, converged
    indexes = sync_client[project.db].users.index_information()
    assert any(info["key"] == [("email", 1)] and info.get("unique") for info in indexes.values())

    # one document of the old shape written after the migration completed: verify finds it
    await db.people.insert_one({"_id": 987654, "first": "a", "last": "b", "__v": 1, "__rev": 1})
    schedule = tasks.beat_schedule(verify_every=30, audit_every=60, background_every=None)
    verify, audit = schedule["mongoshift.background-verify"], schedule["mongoshift.audit"]
    verified = app_send(redis_harness, verify).get(timeout=60)
    assert [(v["migration"], v["found"]) for v in verified] == [("20260101000001_names.py", True)]
    assert all("987654" not in str(v) for v in verified)  # never an id
    audited = app_send(redis_harness, audit).get(timeout=60)
    assert "findings" in audited
    # a plain delay() goes to the registration's queue too (the worker serves that queue alone)
    assert "findings" in tasks.audit.delay().get(timeout=60)


def test_every_task_defaults_to_the_registrations_queue() -> None:
    app = Celery("queue-test", set_as_current=False)
    tasks = register(app, settings="mongoshift.toml", queue="migrations")
    every = [tasks.up, tasks.down, tasks.redo, tasks.coordinator, tasks.lane, tasks.background_tick, tasks.converge, tasks.verify, tasks.audit, tasks.tenant]
    assert {app.amqp.router.route({}, task.name)["queue"].name for task in every} == {"migrations"}  # by the app's task_routes
    plain = Celery("no-queue", set_as_current=False)
    assert plain.amqp.router.route({}, register(plain, settings="mongoshift.toml").audit.name)["queue"].name == "celery"


def app_send(harness, entry):  # type: ignore[no-untyped-def]
    """Send a beat entry as the beat would: its task by name, its kwargs and options."""
    return harness.app.send_task(entry["task"], kwargs=entry["kwargs"], **entry.get("options", {}))


def test_the_beat_schedule_names_the_registered_tasks() -> None:
    app = Celery("schedule-test", set_as_current=False)
    tasks = register(app, settings="mongoshift.toml", prefix="ops.migrations", queue="migrations")
    schedule = tasks.beat_schedule(background_every=30, verify_every=None)
    assert schedule == {
        "ops.migrations.background-tick": {"task": "ops.migrations.background.tick", "schedule": 30.0, "kwargs": {}, "options": {"queue": "migrations"}},
        "ops.migrations.audit": {"task": "ops.migrations.audit", "schedule": 3600.0, "kwargs": {}, "options": {"queue": "migrations"}},
    }
    assert all(entry["task"] in app.tasks for entry in schedule.values())
    with pytest.raises(ConfigInvalidError, match="at least 1"):
        tasks.beat_schedule(audit_every=0)
    # NaN passed "< 1" (every comparison with it is false) and infinity is no period: neither is a schedule.
    for every in (float("nan"), float("inf")):
        with pytest.raises(ConfigInvalidError, match="at least 1"):
            tasks.beat_schedule(audit_every=every)
    # The worker refuses a verify whose reopen is not True or False (exit 25): a schedule that says "yes" failed every tick.
    with pytest.raises(ConfigInvalidError, match="reopen is True or False, not a str"):
        tasks.beat_schedule(reopen="yes")  # type: ignore[arg-type]
    # the refusal named the entry ("background-verify: the schedule takes ..."), not the argument the caller wrote
    with pytest.raises(ConfigInvalidError, match=r"^beat_schedule\(\): verify_every takes seconds \(at least 1\) or None, not 0$"):
        tasks.beat_schedule(verify_every=0)
    with pytest.raises(ConfigInvalidError, match=r"^beat_schedule\(\): background_every takes seconds"):
        tasks.beat_schedule(background_every=-5)


def test_the_line_and_background_options_refuse_a_value_a_worker_could_not_use() -> None:
    """They were taken as given: a poll of 0 re-sends a waiting task with no countdown, again and again, and NaN or a
    negative time reached every countdown, deadline and lease made from them."""
    from mongoshift.celery import BackgroundOptions, LineOptions

    nan, inf = float("nan"), float("inf")
    for line in ({"poll_seconds": 0}, {"poll_seconds": inf}, {"lock_wait_seconds": nan}, {"lock_wait_seconds": -1},
                 {"line_wait_seconds": nan}, {"intent_ttl_seconds": 0}, {"intent_ttl_seconds": "60"}, {"poll_seconds": True}):
        with pytest.raises(ConfigInvalidError, match=f"LineOptions: {next(iter(line))} must be a number of seconds"):
            LineOptions(**line)  # type: ignore[arg-type]
    for background in ({"poll_seconds": nan}, {"poll_seconds": 0}, {"chain_ttl_seconds": inf}, {"chain_ttl_seconds": -5}):
        with pytest.raises(ConfigInvalidError, match=f"BackgroundOptions: {next(iter(background))} must be a number of seconds"):
            BackgroundOptions(**background)  # type: ignore[arg-type]
    for errors in (0, 2.5, "8"):
        with pytest.raises(ConfigInvalidError, match="max_lane_errors must be a whole number at least 1"):
            BackgroundOptions(max_lane_errors=errors)  # type: ignore[arg-type]
    assert LineOptions(lock_wait_seconds=0, line_wait_seconds=0).lock_wait_seconds == 0  # no wait at all is a choice
    assert BackgroundOptions(poll_seconds=None, max_lane_errors=1).max_lane_errors == 1
    with pytest.raises(ConfigInvalidError, match="line must be a LineOptions"):
        register(Celery("x", set_as_current=False), line={"poll_seconds": 1})  # type: ignore[arg-type]



def test_a_lease_longer_than_an_intent_takes_and_a_queue_that_is_no_name_are_refused_when_made() -> None:
    """``LineOptions(intent_ttl_seconds=30 days)`` (``BackgroundOptions(chain_ttl_seconds=...)`` too) was accepted, then every
    ``enqueue_up()`` refused it ("an intent's ttl_seconds must be ... at most 604800"); ``register(queue=5)`` was accepted,
    then a plain ``audit.delay()`` raised AttributeError. Both are exit 6 when made, naming the option."""
    from mongoshift.celery import BackgroundOptions, LineOptions

    week = 7 * 86_400
    assert LineOptions(intent_ttl_seconds=week).intent_ttl_seconds == week and BackgroundOptions(chain_ttl_seconds=week).chain_ttl_seconds == week
    with pytest.raises(ConfigInvalidError, match="LineOptions: intent_ttl_seconds must be a number of seconds above 0 and at most 604800, not 2592000"):
        LineOptions(intent_ttl_seconds=30 * 86_400)
    with pytest.raises(ConfigInvalidError, match="BackgroundOptions: chain_ttl_seconds must be a number of seconds above 0 and at most 604800"):
        BackgroundOptions(chain_ttl_seconds=week + 1)
    for queue in (5, "", "  ", b"migrations"):
        with pytest.raises(ConfigInvalidError, match="queue must be a queue name"):
            register(Celery("x", set_as_current=False), settings="mongoshift.toml", queue=queue)  # type: ignore[arg-type]



def test_a_converge_is_queued_with_yes_true_or_false_only() -> None:
    """``enqueue_converge(yes="no")`` was queued as ``bool("no")``, True: the destructive converge where it is allowed."""
    tasks = register(Celery("x", broker="memory://", set_as_current=False), settings="mongoshift.toml", allow={"up", "converge_destructive"})
    for yes in ("no", 0, None):
        with pytest.raises(ConfigInvalidError, match=f"yes must be True or False, not {type(yes).__name__}"):
            tasks.enqueue_converge(yes=yes)  # type: ignore[arg-type]


def test_registration_refuses_what_a_worker_could_not_use() -> None:
    with pytest.raises(ConfigInvalidError, match="Celery app"):
        register(object())  # type: ignore[arg-type]
    with pytest.raises(ConfigInvalidError, match="prefix"):
        register(Celery("x", set_as_current=False), prefix="not a name")
    with pytest.raises(ConfigInvalidError, match="settings must be"):
        register(Celery("x", set_as_current=False), settings=42)  # type: ignore[arg-type]

    async def awaited(event: object) -> None: ...

    with pytest.raises(ConfigInvalidError, match="observers"):
        register(Celery("x", set_as_current=False), observers=[awaited])


def test_a_wait_takes_a_number_of_seconds_and_says_a_timeout_with_exit_14() -> None:
    """``LineGroup.wait(timeout=nan)`` waited for ever (no time is past NaN), a text failed in Celery's arithmetic and
    -1 read "did not end within -1s"; ``BackgroundStart.wait`` and ``TenantGroup.wait`` let Celery's own TimeoutError
    out, with no exit code, where ``LineGroup.wait`` says MigrationTimeoutError (exit 14)."""
    from celery.result import AsyncResult, GroupResult

    from mongoshift.celery.tasks import BackgroundStart, LineGroup, TenantGroup
    from mongoshift.errors import ExitCode, MigrationTimeoutError

    app = Celery("waits", broker="memory://", backend="cache+memory://", set_as_current=False)
    never = AsyncResult("no-such-task", app=app)  # PENDING for ever: no worker will run it
    line = LineGroup(group="g", batch=1, names=["0001_a.py"], result=GroupResult("g", [never], app=app))
    for timeout in (float("nan"), -1, "5", True):
        with pytest.raises(ConfigInvalidError, match="wait\\(\\): timeout must be a number of seconds at least 0"):
            line.wait(timeout=timeout)  # type: ignore[arg-type]
    with pytest.raises(ConfigInvalidError, match="interval must be a number of seconds above 0"):
        line.wait(timeout=1, interval=0)
    start = BackgroundStart("0002_b.py", True, "chain", never)
    tenants = TenantGroup("up", "g", ["tenant_a"], ["no-such-task"], GroupResult("g", [never], app=app))
    for waited, says in ((lambda: start.wait(timeout=0.05), "0002_b.py: its chain did not stop within 0.05s"),
                         (lambda: tenants.wait(timeout=0.05, interval=0.01), "tenant_a still queued or running")):
        with pytest.raises(MigrationTimeoutError, match=says) as caught:
            waited()
        assert caught.value.exit_code == ExitCode.TIMEOUT == 14


def test_a_line_task_whose_pool_child_died_is_aborted_not_a_bug() -> None:
    """A pool child killed in a body (``kill -9``, the OOM killer) ended its task with Celery's WorkerLostError, read as
    exit 1 ``error``, which docs/exit-codes.md calls a bug to report. It is exit 11 ``aborted``, saying what is left."""
    from celery.exceptions import WorkerLostError

    from mongoshift.celery.tasks import LineGroup
    from mongoshift.errors import ExitCode

    line = LineGroup(group="g", batch=1, names=["0001_a.py"])
    result = line._read("0001_a.py", WorkerLostError("Worker exited prematurely: signal 9 (SIGKILL) Job: 0."))
    assert (result.outcome, result.code, result.kind) == ("failed", int(ExitCode.ABORTED), "aborted")
    assert "the worker process running it ended before it did" in (result.error or "") and "end blocked by it" in (result.error or "")
