"""Issue 28 on Celery: a command fanned out as one task per tenant database, the group's outcome as a report."""

from __future__ import annotations

import pytest

from mongoshift import api
from mongoshift.celery import TenantPayload
from mongoshift.celery.payloads import parse
from mongoshift.errors import TaskInvalidError, TenantsInvalidError

pytestmark = pytest.mark.celery

COUNTED = '''
def up(ctx):
    if ctx.db.fail_here.find_one({}) is not None:
        raise RuntimeError("told to fail")
    ctx.db.counters.update_one({"_id": __name__}, {"$inc": {"n": 1}}, upsert=True)


def down(ctx):
    ctx.db.counters.delete_many({})
'''


@pytest.fixture
def tenants(project, sync_client):  # type: ignore[no-untyped-def]
    names = [f"{project.db}_{i}" for i in range(3)]
    with project.config.open("a", encoding="utf-8") as config:
        config.write(f"[mongoshift.tenants]\ndatabases = {names!r}\n".replace("'", '"'))
    yield names
    for name in names:
        sync_client.drop_database(name)


def test_an_up_fanned_out_per_tenant_reports_every_tenant(redis_harness, project, tenants, sync_client) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", COUNTED)
    project.add("0002_b.py", COUNTED)
    sync_client[tenants[1]].fail_here.insert_one({})
    redis_harness.worker("-P", "prefork", "-c", "2")
    report = redis_harness.tasks.enqueue_tenants("up").wait(timeout=120)
    assert [r.name for r in report.rows] == tenants
    outcomes = {r.name: (r.outcome, r.applied) for r in report.rows}
    assert outcomes[tenants[0]] == outcomes[tenants[2]] == ("done", 2)
    failed = report.rows[1]
    assert failed.outcome == "failed" and failed.error is not None and (failed.error.kind, failed.exit_code) == ("execution_failed", 7)
    assert report.exit_code == 47

    sync_client[tenants[1]].fail_here.drop()
    again = redis_harness.tasks.enqueue_tenants("up", api.Tenants(all=True)).wait(timeout=120)
    assert {r.name: r.outcome for r in again.rows} == {tenants[0]: "already at target", tenants[1]: "done", tenants[2]: "already at target"}
    assert again.exit_code == 0
    for name in tenants:
        assert sync_client[name].counters.count_documents({"n": 1}) == 2  # each migration once per tenant


def test_a_fan_out_is_refused_before_anything_is_queued(redis_harness, project, tenants) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(TenantsInvalidError, match="no canary"):
        redis_harness.tasks.enqueue_tenants("up", api.Tenants(all=True, canary=1))
    with pytest.raises(TenantsInvalidError, match="not a tenant"):
        redis_harness.tasks.enqueue_tenants("up", api.Tenants(names=["someone_else"]))
    with pytest.raises(TaskInvalidError, match="tenant"):
        parse(TenantPayload, "mongoshift.tenant", {"v": 1, "command": "up", "tenant": "a/b", "group": "g", "wait_until": 1.0})
