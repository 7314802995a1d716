"""The worker's consent (``register(app, allow=...)``): anyone who can write to the broker can queue a task, so a
worker runs a rollback, a redo or one file out of the line's order only when its own registration allows it.
Refused, such a task runs nothing and its result and intent say why (``task_refused``, exit 54)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from celery import Celery

from mongoshift import api
from mongoshift.celery import DEFAULT_ALLOW, LINE_KINDS, LineOptions, LineResult, register
from mongoshift.celery.line import plan_line
from mongoshift.errors import ConfigInvalidError, ExitCode, TaskRefusedError, TenantsInvalidError

from .conftest import until
from .test_line_tasks import STEP

NAMES = [f"2026010100000{i}_step_{i}.py" for i in range(1, 3)]
OPTIONS = LineOptions(lock_wait_seconds=0.2, poll_seconds=0.2, line_wait_seconds=60.0, intent_ttl_seconds=60.0)


def _app() -> Celery:
    return Celery(f"allow-{uuid.uuid4().hex[:6]}", broker="memory://", backend="cache+memory://", set_as_current=False)


def test_the_default_takes_the_line_forward_only_and_allow_is_checked() -> None:
    assert DEFAULT_ALLOW == {"up"} and LINE_KINDS == {"up", "down", "redo", "unordered"}
    assert register(_app(), settings="mongoshift.toml").allow == {"up"}
    assert register(_app(), settings="mongoshift.toml", allow=["up", "down"]).allow == {"up", "down"}
    assert register(_app(), settings="mongoshift.toml", allow=set()).allow == frozenset()
    for allow, says in (("up", "a set of the kinds"), ({"up", "sudo"}, "not 'sudo'"), ([1], "a set of the kinds"), (None, "a set of the kinds")):
        with pytest.raises(ConfigInvalidError, match=says):
            register(_app(), settings="mongoshift.toml", allow=allow)  # type: ignore[arg-type]


def test_a_producer_of_a_default_registration_refuses_what_its_workers_would(project) -> None:  # type: ignore[no-untyped-def]
    tasks = register(_app(), settings=project.settings())
    for enqueue, refused in (
        (tasks.enqueue_down, ["down"]),
        (tasks.enqueue_redo, ["redo"]),
        (lambda: tasks.enqueue_up(NAMES[0]), ["unordered"]),
        (lambda: tasks.enqueue_down(NAMES[0]), ["down", "unordered"]),
        (lambda: tasks.enqueue_tenants("down"), ["down"]),
    ):
        with pytest.raises(TaskRefusedError) as caught:
            enqueue()
        assert caught.value.exit_code == ExitCode.TASK_REFUSED == 54 and caught.value.details["refused"] == refused
        assert "register(app, allow=...)" in caught.value.message and "nothing was queued" in caught.value.message
        assert "this worker" not in caught.value.message  # said by the producer: no worker was asked


def test_a_fan_out_without_a_tenants_section_names_the_apis_words_not_a_flag(project) -> None:  # type: ignore[no-untyped-def]
    """``enqueue_tenants("up")`` selects every tenant of ``[tenants]``: without one, the refusal says so in the
    Python API's words (the CLI's ``--all-tenants`` was never given), and nothing is queued."""
    tasks = register(_app(), settings=project.settings())
    with pytest.raises(TenantsInvalidError) as caught:
        tasks.enqueue_tenants("up")
    assert caught.value.exit_code == 46 and "Tenants(all=True) needs a [tenants] section" in caught.value.message
    assert "--" not in caught.value.message


async def test_a_rollback_a_worker_does_not_allow_is_recorded_failed_and_runs_nothing(project, db, client) -> None:  # type: ignore[no-untyped-def]
    for name in NAMES:
        project.add(name, STEP.format(name=name))
    settings = project.settings()
    await api.up(settings, client=client)
    planned = await plan_line(settings, OPTIONS, direction="down", client=client)  # queued by a producer that allows it
    (payload, task_id), (behind, _) = planned.tasks
    worker = register(_app(), settings=settings, line=OPTIONS)  # the worker's own registration: the default

    result = LineResult.of(worker.down.apply(args=(payload.model_dump(),), task_id=task_id).get())

    assert (result.name, result.direction, result.outcome, result.code, result.kind) == (NAMES[1], "down", "failed", 54, "task_refused")
    assert "does not take rollbacks" in (result.error or "") and "add 'down'" in (result.error or "")
    assert await db.steps.count_documents({}) == 2  # nothing rolled back
    assert await db["_mongoshift_migrations"].count_documents({"status": "applied"}) == 2
    intent = (await api.read_intents(settings, [f"down:{NAMES[1]}"], client=client))[f"down:{NAMES[1]}"]
    assert (intent.state, intent.data.get("kind")) == ("failed", "task_refused")  # the task behind it is blocked, not left waiting
    assert behind.name == NAMES[0]

    one_file = payload.model_copy(update={"direction": "up", "ordered": False, "name": NAMES[0]})
    alone = LineResult.of(worker.up.apply(args=(one_file.model_dump(),), task_id=uuid.uuid4().hex).get())
    assert (alone.outcome, alone.kind) == ("failed", "task_refused") and "outside the line's order" in (alone.error or "")


@pytest.mark.celery
def test_a_worker_refuses_rollbacks_and_single_files_queued_without_its_consent(redis_harness, project, sync_client) -> None:  # type: ignore[no-untyped-def]
    for name in NAMES:
        project.add(name, STEP.format(name=name))
    tasks = redis_harness.tasks  # the producer allows every kind: only the worker decides
    strict = redis_harness.worker("-P", "solo", allow="up")
    db = sync_client[project.db]

    def applied() -> list[str]:
        return sorted(r["name"] for r in db["_mongoshift_migrations"].find({"status": "applied"}))

    assert [r.outcome for r in tasks.enqueue_up().wait(timeout=90)] == ["applied", "applied"]

    back = tasks.enqueue_down().wait(timeout=90)
    assert [(r.name, r.outcome, r.code, r.kind) for r in back] == [(n, "failed", 54, "task_refused") for n in reversed(NAMES)]
    payload: dict[str, Any] = {"v": 2, "name": NAMES[1], "group": "g", "batch": 1, "wait_until": 4e9, "direction": "down",
                               "checksum": "0" * 64, "ordered": False}
    sent = LineResult.of(tasks.down.apply_async(args=(payload,)).get(timeout=60))  # past enqueue: straight to the broker
    assert (sent.outcome, sent.kind) == ("failed", "task_refused")
    assert applied() == NAMES and db.steps.count_documents({}) == 2
    assert "refused" in strict.tail()

    strict.stop()
    redis_harness.worker("-P", "solo", allow="up,down")  # a worker that consents to rollbacks
    again = tasks.enqueue_down().wait(timeout=90)
    assert [(r.name, r.outcome) for r in again] == [(NAMES[1], "reverted"), (NAMES[0], "reverted")]
    until(lambda: applied() == [] and db.steps.count_documents({}) == 0, 5, "rolled back", redis_harness)


def test_a_tenant_rollback_a_worker_does_not_allow_runs_nothing(project) -> None:  # type: ignore[no-untyped-def]
    from mongoshift.celery import TenantPayload

    worker = register(_app(), settings=project.settings())  # the default: no rollbacks
    payload = TenantPayload(command="down", tenant="tenant_a", group="g", wait_until=4e9).model_dump()
    row = worker.tenant.apply(args=(payload,), task_id=uuid.uuid4().hex).get()
    assert (row["name"], row["outcome"]) == ("tenant_a", "failed")
    assert (row["error"]["kind"], row["error"]["code"]) == ("task_refused", 54) and "does not take rollbacks" in row["error"]["message"]


async def test_a_destructive_converge_needs_the_workers_consent_as_a_rollback_does(project, db) -> None:  # type: ignore[no-untyped-def]
    """``enqueue_converge(yes=True)`` rebuilt and dropped indexes on any worker; it now needs ``converge_destructive``
    in ``allow``, on the producer (refused when queued) and on the worker (refused when run, nothing changed)."""
    from mongoshift.celery import CONVERGE_DESTRUCTIVE, TASK_KINDS

    assert TASK_KINDS == LINE_KINDS | {CONVERGE_DESTRUCTIVE} == {"up", "down", "redo", "unordered", "converge_destructive"}
    (project.root / "collections").mkdir(exist_ok=True)
    (project.root / "collections" / "items.toml").write_text('indexes = [{ keys = { x = 1 }, name = "x_1", sparse = true }]\n')
    await db.items.create_index("x", name="x_1")  # not sparse: converge must rebuild it, a destructive step
    settings = project.settings()

    default = register(_app(), settings=settings)
    with pytest.raises(TaskRefusedError) as caught:
        default.enqueue_converge(yes=True)
    assert caught.value.exit_code == 54 and caught.value.details["refused"] == ["converge_destructive"]
    assert "this registration's workers do not take" in caught.value.message and "nothing was queued" in caught.value.message
    result = default.converge.apply(kwargs={"yes": True}).get()  # past enqueue: straight to the worker
    assert result["success"] is False and (result["error"]["kind"], result["error"]["code"]) == ("task_refused", 54)
    assert "add 'converge_destructive'" in result["error"]["message"] and "this worker does not take" in result["error"]["message"]
    assert "sparse" not in (await db.items.index_information())["x_1"]  # nothing rebuilt

    consenting = register(_app(), settings=settings, allow={"up", "converge_destructive"})
    done = consenting.converge.apply(kwargs={"yes": True}).get()
    assert done.get("success", True) is not False, done
    assert (await db.items.index_information())["x_1"].get("sparse") is True
