"""Rolling one call out across the selected tenants: bounded, canaries first, stopping honestly.

- At most ``parallel`` tenants run at once: that many workers take the next tenant in
  selection order, on one event loop, over the caller's shared clients.
- ``canary`` K: the first K tenants run first, all of them (within the same bound); if any of
  them is not ok (failed, locked, cancelled), no other tenant starts.
- By default the first failure stops scheduling: tenants running then finish, the rest are
  ``not reached``. ``continue_on_error`` goes on and reports every failure.
- A tenant whose lock another run holds is ``locked`` (``--wait`` waits for it instead); it
  does not stop the rollout, and the exit code says it was not done.
- The cancel signal (Ctrl-C / SIGTERM) stops scheduling; running tenants stop at their
  migration boundary as a single run does (their ``cancel`` follows this one).

Each tenant's start and end is an event (``tenant_start``, ``tenant_end``: the tenant's
database name, its outcome, and how many ran at that moment), so a test or an observer sees
the bound without timing anything.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shlex
import time
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field

from pymongo.errors import PyMongoError

from ..errors import ExitCode, LockHeldError, MongoshiftError, RunAbortedError, TenantsInvalidError
from ..project.events import Events
from ..project.redaction import redact
from ..project.run import CancelSignal, LinkedCancel
from ..project.server_errors import from_pymongo
from ..project.wording import plural
from .report import Judged, RolloutReport, TenantError, TenantRow
from .selection import PARAMETER_WORDS, SelectionWords, Tenant

log = logging.getLogger("mongoshift.tenants")

#: The tenant whose call runs in this task (and the worker threads it starts): log lines name it.
current_tenant: ContextVar[str | None] = ContextVar("mongoshift_tenant", default=None)

#: The default bound: enough to overlap round trips, few enough to keep one client's pool calm.
DEFAULT_PARALLEL = 4
#: Tenants running at once, at most (a bound far above it is a typing mistake, not a plan).
MAX_PARALLEL = 256

#: One tenant's call: given its tenant and its own cancel signal (following the rollout's).
TenantCall = Callable[[Tenant, CancelSignal], Awaitable[Judged]]


@dataclass(frozen=True)
class Rollout:
    """How a command is rolled out: ``parallel`` tenants at once, ``canary`` first, stop on the first failure or not."""

    parallel: int = DEFAULT_PARALLEL
    canary: int = 0
    continue_on_error: bool = False
    #: How a refusal names the bounds: as the caller does (the API's parameters by default, the CLI its flags).
    words: SelectionWords = field(default=PARAMETER_WORDS, kw_only=True, repr=False)

    def check(self, selected: int) -> Rollout:
        """Refuse, before anything runs, a bound that cannot work for ``selected`` tenants."""
        said = self.words
        if isinstance(self.parallel, bool) or not isinstance(self.parallel, int) or not 1 <= self.parallel <= MAX_PARALLEL:
            raise TenantsInvalidError(f"{said.parallel} must be a whole number from 1 to {MAX_PARALLEL}, not {self.parallel!r}")
        if isinstance(self.canary, bool) or not isinstance(self.canary, int) or self.canary < 0:
            raise TenantsInvalidError(f"{said.canary} must be a whole number of tenants (0 or more), not {self.canary!r}")
        if self.canary > selected:
            raise TenantsInvalidError(
                f"{said.canary} {self.canary} is more than the {plural(selected, 'selected tenant')}",
                canary=self.canary, selected=selected,
            )
        return self


async def roll_out(
    command: str,
    tenants: Sequence[Tenant],
    run: TenantCall,
    rollout: Rollout,
    *,
    cancel: CancelSignal,
    events: Events | None = None,
) -> RolloutReport:
    """Run ``run`` for each tenant as ``rollout`` says; every tenant gets a row, whatever happens."""
    rollout.check(len(tenants))
    events = events or Events()
    report = RolloutReport(command, [TenantRow(t.name, canary=i < rollout.canary) for i, t in enumerate(tenants)])
    rows = dict(zip((t.name for t in tenants), report.rows, strict=True))
    running = 0
    finished = 0
    stop: list[str] = []
    #: A cluster (a tenant's ``uri``; None: the project's) whose server could not be reached, by the first tenant
    #: that found it so: its other tenants are not started (each would wait out the connection's timeout).
    unreachable: dict[str | None, str] = {}
    skipped: list[str] = []

    async def one(tenant: Tenant) -> None:
        nonlocal running, finished
        row = rows[tenant.name]
        running += 1
        events.emit("tenant_start", None, tenant=tenant.name, running=running, total=len(tenants), canary=row.canary, command=command)
        started = time.monotonic()
        scope = current_tenant.set(tenant.name)  # this worker task's own context: its log lines name the tenant
        own = LinkedCancel(cancel)  # a tenant's lost lock stops that tenant only
        cut: asyncio.CancelledError | None = None
        try:
            _judged(row, await run(tenant, own))
        except asyncio.CancelledError as exc:  # the task awaiting the rollout was cancelled: a stop at once
            cut = exc
            row.outcome = "cancelled"
            row.error = TenantError(RunAbortedError.kind, int(ExitCode.ABORTED), "stopped at once: the task awaiting the rollout was cancelled")
        except LockHeldError as exc:
            row.outcome, row.error = "locked", _error(exc, tenant.name)
        except RunAbortedError as exc:  # a stopped run may have applied migrations before it stopped
            row.outcome, row.error = ("cancelled" if own.is_set() else "failed"), _error(exc, tenant.name)
            row.applied, row.rolled_back = _done_before(exc)
        except MongoshiftError as exc:
            row.outcome, row.error = "failed", _error(exc, tenant.name)
            row.applied, row.rolled_back = _done_before(exc)
        except PyMongoError as exc:
            row.outcome, row.error = "failed", _error(from_pymongo(exc), tenant.name)
        except Exception as exc:  # a bug in one tenant's run must not hide the other tenants' rows
            log.debug("tenant %s: unexpected failure", tenant.name, exc_info=True)
            row.outcome, row.error = "failed", TenantError("error", 1, f"unexpected {type(exc).__name__}")
        finally:
            current_tenant.reset(scope)
            row.duration_ms = int((time.monotonic() - started) * 1000)
            running -= 1
            finished += 1
        failed = sum(1 for r in report.rows if r.outcome == "failed")
        events.emit(
            "tenant_end", None, tenant=tenant.name, outcome=row.outcome, running=running, finished=finished,
            total=len(tenants), failed=failed, error_kind=row.error.kind if row.error else None, command=command,
            duration_ms=row.duration_ms,
        )
        if cut is not None:  # its end is told (an observer counting the tenants running sees it end), then the cancel goes on
            raise cut
        if row.error is not None and row.error.code == int(ExitCode.CONNECTION_FAILED):
            unreachable.setdefault(tenant.uri, tenant.name)
        # Canaries are judged together; a failure after Ctrl-C (a migration that saw ``ctx.cancelled``) is not why it stopped.
        if row.outcome == "failed" and not row.canary and not rollout.continue_on_error and not stop and not cancel.is_set():
            stop.append(f"stopped after {tenant.name} failed: the tenants not started were not reached")

    async def phase(batch: Sequence[Tenant]) -> None:
        pending = iter(batch)

        async def worker() -> None:
            while not stop and not cancel.is_set():
                tenant = next(pending, None)
                if tenant is None:
                    return
                if tenant.uri in unreachable:  # left "not reached": a later run takes it up once the server is back
                    if not skipped:
                        skipped.append(
                            f"the server of {unreachable[tenant.uri]} could not be reached: the tenants on the same server "
                            "not started were not reached; run again once it answers"
                        )
                    continue
                await one(tenant)

        async with asyncio.TaskGroup() as group:
            for _ in range(min(rollout.parallel, len(batch))):
                group.create_task(worker())

    canaries, rest = tenants[: rollout.canary], tenants[rollout.canary :]
    await phase(canaries)
    troubled = [rows[t.name].name for t in canaries if not rows[t.name].ok]
    if troubled and not stop:
        stop.append(f"canary {', '.join(troubled)} did not succeed: the other tenants were not started")
    if not stop and not cancel.is_set():
        await phase(rest)
    if cancel.is_set():
        report.interrupted = True
        if not stop:
            stop.append(f"{cancel.reason or 'cancelled'}: the tenants not started were not reached")
    if any(row.outcome == "not reached" for row in report.rows):
        report.stopped = stop[0] if stop else skipped[0] if skipped else None
    return report


def _judged(row: TenantRow, judged: Judged) -> None:
    row.outcome = "failed" if judged.error is not None and judged.outcome != "cancelled" else judged.outcome
    row.applied, row.rolled_back, row.error, row.result = judged.applied, judged.rolled_back, judged.error, judged.result


def _done_before(exc: MongoshiftError) -> tuple[int, int]:
    """What a failed run had applied and rolled back before it failed (``details.results``, as the line reports it)."""
    results = exc.details.get("results")
    statuses = [r.get("status") for r in results if isinstance(r, dict)] if isinstance(results, list) else []
    return statuses.count("applied"), statuses.count("reverted")


#: A command a message tells the user to run, as every message quotes one: ``'mongoshift unlock'``.
_ADVISED = re.compile(r"'mongoshift ([^']*)'")


def _error(exc: MongoshiftError, tenant: str) -> TenantError:
    """The tenant's error for its row: a command its message advises names the tenant (a bare ``'mongoshift unlock'``
    in a project of tenants acts on no database: the user would copy it and be refused)."""
    return TenantError(exc.kind, int(exc.exit_code), for_tenant(redact(exc.message), tenant))


def for_tenant(message: str, tenant: str) -> str:
    """``message`` with each ``'mongoshift ...'`` command it advises given ``--tenant TENANT``, where it names no
    database yet and the name needs no shell quoting (a name that does is left for the user to add)."""
    if shlex.quote(tenant) != tenant:
        return message

    def named(match: re.Match[str]) -> str:
        words = match.group(1)
        if any(flag in words.split() for flag in ("--db", "--tenant", "--tenants", "--all-tenants")):
            return match.group(0)
        return f"'mongoshift {words} --tenant {tenant}'"

    return _ADVISED.sub(named, message)
