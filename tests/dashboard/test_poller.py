"""The dashboard's shared poller when a read fails in a way nobody foresaw."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from mongoshift.dashboard.poller import Poller


class Flaky:
    """A session whose status read raises an unforeseen error while ``broken`` is set."""

    def __init__(self) -> None:
        self.broken = True
        self.background = self

    def rescan(self) -> None:
        pass

    async def status(self, **_: Any) -> list[Any]:
        if self.broken:
            raise KeyError("secret-document-value")
        return []

    async def lock_status(self) -> None:
        return None

    async def audit(self) -> None:
        return None

    async def watch_status(self) -> list[Any]:
        return []


async def test_an_unforeseen_error_reaches_the_pages_and_the_loop_polls_on(caplog: pytest.LogCaptureFixture) -> None:
    session = Flaky()
    poller = Poller(session, interval=0.01)  # type: ignore[arg-type]
    caplog.set_level(logging.ERROR, logger="mongoshift.dashboard")
    async with poller.listening():
        failed = await asyncio.wait_for(poller.next(0), 30)  # without the fix the loop dies and this waits for ever
        assert failed is not None and failed.error is not None and "KeyError" in failed.error
        assert "secret-document-value" not in failed.error and "secret-document-value" not in caplog.text
        session.broken = False
        while (snap := await asyncio.wait_for(poller.next(failed.tick), 30)) is not None and snap.error is not None:
            failed = snap
        assert snap is not None and snap.error is None and poller.polls >= 1  # the same loop read again
    await poller.close()


async def test_a_reload_reads_the_tenants_again_once_they_are_older_than_the_tenants_interval() -> None:
    """With no page streaming, each reload is one read: the tenants, counted by reads, were read again
    only every TENANTS_EVERY reloads (a minute stale at a reload every few seconds); by age they are
    read again once TENANTS_EVERY intervals old, and not before."""
    from mongoshift.dashboard import poller as polling
    from mongoshift.dashboard.views import TenantsSummary

    now = [0.0]
    reads = 0

    async def tenants() -> TenantsSummary:
        nonlocal reads
        reads += 1
        return TenantsSummary(total=reads, counts={"up to date": reads, "behind": 0, "failed": 0}, behind=[], failed=[])

    poller = Poller(None, interval=1.0, clock=lambda: now[0], tenants=tenants)
    assert (await poller.current()).tenants is not None and reads == 1
    for _ in range(3):  # reloads within the tenants' interval: the line is read, the tenants are not
        now[0] += 2.0
        await poller.current()
    assert reads == 1
    now[0] = polling.TENANTS_EVERY * 1.0  # the tenants are now that many intervals old
    snap = await poller.current()
    assert reads == 2 and snap.tenants is not None and snap.tenants.total == 2


async def test_a_reload_runs_the_audit_again_once_it_is_older_than_the_audit_interval() -> None:
    """The same rule for the audit (the overview's verdict per migration, the drift and verify section): counted by
    reads, a dashboard reloaded now and then without a stream kept an audit of minutes ago, showing a migration
    "failed" with its audit "ok"; by age it runs again once AUDIT_EVERY intervals old, and not before."""
    from mongoshift.dashboard import poller as polling

    class Audited(Flaky):
        def __init__(self) -> None:
            super().__init__()
            self.broken = False
            self.audits = 0

        async def audit(self) -> object:
            self.audits += 1
            return object()  # a report (None would be "never run")

    now = [0.0]
    session = Audited()
    poller = Poller(session, interval=1.0, clock=lambda: now[0])  # type: ignore[arg-type]
    assert (await poller.current()).error is None and session.audits == 1
    for _ in range(3):  # reloads within the audit's interval: the line is read, the audit is not run
        now[0] += 2.0
        await poller.current()
    assert session.audits == 1 and poller.polls == 4
    now[0] = polling.AUDIT_EVERY * 1.0  # the audit is now that many intervals old
    await poller.current()
    assert session.audits == 2
