"""The rollout executor on its own: the bound, canaries, stopping, locked tenants, Ctrl-C, the report.

Each tenant's call is a function of the test, so what ran, and how many ran at once, is counted
exactly (by counters and the rollout's events), never timed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import pytest

from mongoshift.errors import ExecutionFailedError, LockHeldError, RunAbortedError
from mongoshift.project.events import Event, Events
from mongoshift.project.run import CancelSignal
from mongoshift.tenants.report import Judged, RolloutReport
from mongoshift.tenants.rollout import Rollout, roll_out
from mongoshift.tenants.selection import Tenant

NAMES = [f"t{i:02d}" for i in range(10)]


def tenants(names: list[str] = NAMES) -> list[Tenant]:
    return [Tenant(n) for n in names]


async def go(
    run: Callable[[Tenant, CancelSignal], Awaitable[Judged]],
    rollout: Rollout,
    names: list[str] = NAMES,
    cancel: CancelSignal | None = None,
) -> tuple[RolloutReport, list[Event]]:
    seen: list[Event] = []
    report = await roll_out("up", tenants(names), run, rollout, cancel=cancel or CancelSignal(), events=Events([seen.append]))
    return report, seen


def outcomes(report: RolloutReport) -> dict[str, str]:
    return {row.name: row.outcome for row in report.rows}


@pytest.mark.parametrize("parallel", [1, 3, 4])
async def test_never_more_tenants_at_once_than_the_bound(parallel: int) -> None:
    running = 0
    peak = 0
    full = asyncio.Event()
    release = asyncio.Event()

    async def run(tenant: Tenant, cancel: CancelSignal) -> Judged:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running == parallel:
            full.set()
        await release.wait()  # every tenant holds its slot until the bound has been reached
        running -= 1
        return Judged("done", applied=1)

    async def open_gate() -> None:
        await full.wait()
        release.set()

    opener = asyncio.create_task(open_gate())
    report, seen = await go(run, Rollout(parallel=parallel))
    await opener
    assert peak == parallel  # reached, and never passed (an unbounded executor starts all ten at once)
    starts = [e for e in seen if e.kind == "tenant_start"]
    assert max(e.data["running"] for e in starts) == parallel
    assert [e.data["tenant"] for e in starts] == NAMES  # selection order
    assert report.ok and report.exit_code == 0 and all(r.applied == 1 for r in report.rows)


async def test_a_failed_canary_leaves_the_other_tenants_untouched() -> None:
    called: list[str] = []

    async def run(tenant: Tenant, cancel: CancelSignal) -> Judged:
        called.append(tenant.name)
        if tenant.name == "t01":
            raise ExecutionFailedError("0002_b.py failed: ValueError")
        return Judged("done", applied=2)

    report, _ = await go(run, Rollout(parallel=4, canary=3))
    assert sorted(called) == ["t00", "t01", "t02"]  # every canary, and no other tenant
    assert outcomes(report)["t01"] == "failed"
    assert [r.outcome for r in report.rows[3:]] == ["not reached"] * 7
    assert [r.canary for r in report.rows] == [True] * 3 + [False] * 7
    assert report.stopped is not None and "canary t01" in report.stopped
    assert report.exit_code == 47


async def test_canaries_that_pass_let_the_rest_run() -> None:
    async def run(tenant: Tenant, cancel: CancelSignal) -> Judged:
        return Judged("done")

    report, seen = await go(run, Rollout(parallel=2, canary=2))
    assert report.ok and report.stopped is None
    ends = [e.data["tenant"] for e in seen if e.kind == "tenant_end"]
    assert set(ends[:2]) == {"t00", "t01"}  # the canaries ended before any other tenant started


async def test_the_first_failure_stops_scheduling_and_running_tenants_finish() -> None:
    b_failed = asyncio.Event()

    async def run(tenant: Tenant, cancel: CancelSignal) -> Judged:
        if tenant.name == "t00":
            await b_failed.wait()  # still running when t01 fails
            return Judged("done", applied=1)
        if tenant.name == "t01":
            b_failed.set()
            raise ExecutionFailedError("0001_a.py failed")
        return Judged("done")

    report, _ = await go(run, Rollout(parallel=2))
    assert outcomes(report)["t00"] == "done" and outcomes(report)["t01"] == "failed"
    assert [r.outcome for r in report.rows[2:]] == ["not reached"] * 8
    assert report.rows[2].exit_code is None and report.rows[1].exit_code == 7
    assert "t01 failed" in (report.stopped or "")
    assert report.exit_code == 47


async def test_continue_on_error_runs_every_tenant_and_reports_every_failure() -> None:
    async def run(tenant: Tenant, cancel: CancelSignal) -> Judged:
        if tenant.name in ("t02", "t07"):
            raise ExecutionFailedError(f"{tenant.name} broke")
        return Judged("already at target")

    report, _ = await go(run, Rollout(parallel=3, continue_on_error=True))
    failed = [r.name for r in report.rows if r.outcome == "failed"]
    assert failed == ["t02", "t07"]
    assert report.counts()["already at target"] == 8 and report.stopped is None and report.exit_code == 47


async def test_a_locked_tenant_is_reported_locked_and_does_not_stop_the_others() -> None:
    async def run(tenant: Tenant, cancel: CancelSignal) -> Judged:
        if tenant.name == "t03":
            raise LockHeldError("the migration lock is held by someone else")
        return Judged("done")

    report, _ = await go(run, Rollout(parallel=2))
    assert outcomes(report)["t03"] == "locked"
    assert report.rows[3].error is not None and report.rows[3].error.kind == "lock_held" and report.rows[3].exit_code == 3
    assert report.counts()["done"] == 9 and report.exit_code == 47  # not done is not success


async def test_ctrl_c_stops_scheduling_and_running_tenants_see_it() -> None:
    cancel = CancelSignal()
    saw: list[str] = []

    async def run(tenant: Tenant, own: CancelSignal) -> Judged:
        if tenant.name == "t01":
            cancel.set("interrupted by SIGINT")
        if own.is_set():  # the tenant's own signal follows the rollout's
            saw.append(tenant.name)
            raise RunAbortedError("stopped at a migration boundary")
        return Judged("done")

    report, _ = await go(run, Rollout(parallel=1), cancel=cancel)
    assert outcomes(report)["t00"] == "done" and outcomes(report)["t01"] == "cancelled"
    assert saw == ["t01"] and [r.outcome for r in report.rows[2:]] == ["not reached"] * 8
    assert report.interrupted and report.exit_code == 11


async def test_a_migration_that_fails_on_ctrl_c_is_not_named_as_why_the_rollout_stopped() -> None:
    """A migration that sees ``ctx.cancelled`` and raises is recorded failed; the rollout stopped for the signal."""
    cancel = CancelSignal()

    async def run(tenant: Tenant, own: CancelSignal) -> Judged:
        if tenant.name == "t01":
            cancel.set("interrupted by SIGINT")
            raise ExecutionFailedError("0002_b.py failed: it saw ctx.cancelled")
        return Judged("done")

    report, _ = await go(run, Rollout(parallel=1), cancel=cancel)
    assert outcomes(report)["t01"] == "failed" and report.interrupted and report.exit_code == 11
    assert report.stopped == "interrupted by SIGINT: the tenants not started were not reached"


async def test_a_tenants_lost_lock_cancels_that_tenant_only() -> None:
    async def run(tenant: Tenant, own: CancelSignal) -> Judged:
        if tenant.name == "t00":
            own.set("the migration lock was lost")
            raise RunAbortedError("stopped: the migration lock was lost")
        return Judged("done")

    report, _ = await go(run, Rollout(parallel=1, continue_on_error=True))
    assert outcomes(report)["t00"] == "cancelled" and report.counts()["done"] == 9 and not report.interrupted


async def test_the_json_report_is_one_document_without_the_errors_values() -> None:
    async def run(tenant: Tenant, cancel: CancelSignal) -> Judged:
        if tenant.name == "t01":
            raise ValueError("customer card 4111-1111 refused")  # a bug: its text may hold anything
        return Judged("done", applied=3, result={"files": 3})

    report, _ = await go(run, Rollout(parallel=2, continue_on_error=True), names=["t00", "t01"])
    document = json.loads(json.dumps(report.to_json(result=lambda r: r)))
    assert "4111" not in json.dumps(document)
    rows = {r["name"]: r for r in document["tenants"]}
    assert rows["t00"]["outcome"] == "done" and rows["t00"]["applied"] == 3 and rows["t00"]["result"] == {"files": 3}
    assert rows["t01"]["error"] == {"kind": "error", "code": 1, "message": "unexpected ValueError"}
    assert document["summary"] == {
        "total": 2, "done": 1, "already_at_target": 0, "failed": 1, "locked": 0, "cancelled": 0, "not_reached": 0,
    }
    assert document["exit_code"] == 47


async def test_a_verdict_without_an_exception_fails_the_tenant() -> None:
    from mongoshift.tenants.report import TenantError

    async def run(tenant: Tenant, cancel: CancelSignal) -> Judged:
        return Judged("done", error=TenantError("pending", 2, "1 migration pending") if tenant.name == "t01" else None)

    report, _ = await go(run, Rollout(continue_on_error=True), names=["t00", "t01"])
    assert outcomes(report) == {"t00": "done", "t01": "failed"} and report.rows[1].exit_code == 2 and report.exit_code == 47


async def test_a_server_that_cannot_be_reached_is_not_tried_again_for_each_of_its_tenants() -> None:
    """Found in a user trial: with --continue-on-error and the cluster's server gone mid-rollout, every remaining tenant
    was tried and waited out its own connection timeout (ten seconds each, hundreds of tenants). The tenants on that
    server are now left not reached after the first finds it gone; those of another server go on."""
    from mongoshift.errors import ConnectionFailedError

    called: list[str] = []

    async def run(tenant: Tenant, cancel: CancelSignal) -> Judged:
        called.append(tenant.name)
        if tenant.name == "t01":
            raise ConnectionFailedError("cannot reach MongoDB at h:1 within 10s: connection refused")
        return Judged("done")

    elsewhere = Tenant("z01", uri="mongodb://other-cluster.example")
    report = await roll_out(
        "up", [*tenants(NAMES[:5]), elsewhere], run, Rollout(parallel=1, continue_on_error=True), cancel=CancelSignal()
    )
    assert called == ["t00", "t01", "z01"]
    assert outcomes(report) == {"t00": "done", "t01": "failed", "t02": "not reached", "t03": "not reached", "t04": "not reached", "z01": "done"}
    assert report.stopped == (
        "the server of t01 could not be reached: the tenants on the same server not started were not reached; run again once it answers"
    )


async def test_a_cancelled_task_still_tells_the_end_of_each_tenant_it_cut() -> None:
    """Cancelling the task that awaits the rollout (``asyncio.wait_for``, an application shutting down) cuts the
    running tenants at once: each still gets its ``tenant_end`` (outcome ``cancelled``, ``aborted``), so an observer
    counting the tenants running sees them end, and the ``CancelledError`` goes on (stop 57, h5: there was none)."""
    seen: list[Event] = []
    all_started = asyncio.Event()

    def observe(event: Event) -> None:
        seen.append(event)
        if event.kind == "tenant_start" and event.data["running"] == 3:
            all_started.set()

    async def run(tenant: Tenant, cancel: CancelSignal) -> Judged:
        await asyncio.Event().wait()  # never ends on its own
        raise AssertionError("unreachable")

    rolling = asyncio.create_task(roll_out("up", tenants(), run, Rollout(parallel=3), cancel=CancelSignal(), events=Events([observe])))
    await all_started.wait()
    rolling.cancel()
    with pytest.raises(asyncio.CancelledError):
        await rolling
    ends = [e for e in seen if e.kind == "tenant_end"]
    assert sorted(e.data["tenant"] for e in ends) == NAMES[:3]
    assert {(e.data["outcome"], e.data["error_kind"]) for e in ends} == {("cancelled", "aborted")}
    assert ends[-1].data["running"] == 0 and ends[-1].data["finished"] == 3
    assert [e.data["tenant"] for e in seen if e.kind == "tenant_start"] == NAMES[:3]  # no tenant started after the cut
