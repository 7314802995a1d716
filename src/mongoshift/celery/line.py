"""The migration line on a job system: what ``enqueue_up`` (``enqueue_down``, ``enqueue_redo``)
puts in the queue, and what each task does.

MongoDB holds the truth, the broker only the intent. Each task runs exactly one migration
with ``up NAME --ordered`` in the group's batch (``down NAME --ordered`` from the end of the
line; one FILE queued on its own without ``--ordered``; ``redo NAME``), under the migration
lock, so that the changelog decides: an applied migration is ``skipped``; one whose
predecessors are not applied waits while their tasks are queued or running (their intents,
:mod:`mongoshift.api.intents`), and is ``blocked`` once one of them failed, or was never
queued. A task that could not run (the lock stayed held, its file changed since it was
queued) is ``failed``. A migration body is never retried here: a waiting task asks again
later, a failed one reports and stays failed.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pymongo import AsyncMongoClient

from .. import api
from ..errors import ConnectionFailedError, ExitCode, LockHeldError, MongoshiftError, NotAppliedError, OutOfOrderError, UriUnavailableError
from .checks import LEASE_MAX_SECONDS, check_number
from .payloads import UpPayload
from .results import LineResult

log = logging.getLogger("mongoshift.celery")

#: What a line task runs: ``up NAME``, ``down NAME`` or ``redo NAME``.
Direction = Literal["up", "down", "redo"]


@dataclass(frozen=True)
class LineOptions:
    """How the line's tasks wait: for the lock, for the tasks ahead of them, and how long an intent lives."""

    #: Seconds one ``up`` waits for the migration lock before its task asks again later.
    lock_wait_seconds: float = 5.0
    #: Seconds between two asks of a task that waits (for the lock, or for the tasks ahead of it).
    poll_seconds: float = 2.0
    #: Seconds a task may wait in all for the tasks ahead of it before it is ``blocked``.
    line_wait_seconds: float = 3600.0
    #: Seconds a queued or running intent holds its migration: a task lost with its message frees it then.
    intent_ttl_seconds: float = 3600.0

    def __post_init__(self) -> None:
        check_number("LineOptions", "lock_wait_seconds", self.lock_wait_seconds, minimum=0)
        check_number("LineOptions", "poll_seconds", self.poll_seconds, minimum=0, above=True)
        check_number("LineOptions", "line_wait_seconds", self.line_wait_seconds, minimum=0)
        # an intent is a lease of at most a week: a longer one was accepted here and refused by every enqueue
        check_number("LineOptions", "intent_ttl_seconds", self.intent_ttl_seconds, minimum=0, above=True, maximum=LEASE_MAX_SECONDS)


@dataclass(frozen=True)
class Wait:
    """The task did not run its migration yet: ask again in ``countdown`` seconds (not a retry of the body)."""

    countdown: float
    reason: str


@dataclass(frozen=True)
class Planned:
    """What one enqueue decided: the tasks to send (payload, task id) and the migrations dropped as duplicates."""

    group: str
    batch: int | None
    tasks: list[tuple[UpPayload, str]]
    dropped: list[str]
    direction: Direction = "up"


def intent_key(name: str, direction: Direction = "up") -> str:
    return f"{direction}:{name}"


async def plan_line(
    settings: api.Settings,
    options: LineOptions,
    *,
    direction: Direction = "up",
    target: str | None = None,
    to: str | None = None,
    batch: int | None = None,
    steps: int | None = None,
    client: AsyncMongoClient[Any] | None = None,
) -> Planned:
    """The migrations to run in order, each claimed for a new task id; one queued or running elsewhere is dropped.

    The plan is the dry run's (``up``; ``down`` for a rollback and for ``redo``, which takes
    one file, the newest applied by default), so a file that does not import or a bad
    selection fails here, before anything is queued. Each payload carries the file's
    checksum: a file changed before its task runs is refused (:func:`mongoshift.api.up`'s
    ``checksums``). A line (no FILE) is ordered; one FILE runs on its own. ``client``: the
    application's (left open); without it, one connection of its own for the plan and the claims."""
    async with api.connect(settings, client=client) as ms:
        if direction == "up":
            preview = await ms.plan("up", target, to=to)
        elif direction == "down":
            preview = await ms.plan("down", target, to=to, batch=batch, steps=steps)
        else:
            preview = await ms.plan("down", target, steps=None if target else 1)
        group = uuid.uuid4().hex
        first = preview.rows[0].batch if preview.rows else None
        # A squash file's task runs the files it replaced: they are not tasks of their own.
        preview.rows = [row for row in preview.rows if row.squashed_into is None]
        wait_until = time.time() + options.line_wait_seconds
        owners = {row.name: uuid.uuid4().hex for row in preview.rows}
        claims = [
            api.Claim(intent_key(name, direction), owner, options.intent_ttl_seconds, {"group": group, "batch": first})
            for name, owner in owners.items()
        ]
        taken = await ms.intents.claim(claims)
    tasks, dropped = [], []
    ordered = target is None and direction != "redo"
    for row, ok in zip(preview.rows, taken, strict=True):
        if not ok:
            dropped.append(row.name)
            continue
        payload = UpPayload(
            name=row.name,
            group=group,
            batch=(first if direction == "up" else row.batch) or 1,
            wait_until=wait_until,
            direction=direction,
            checksum=row.checksum,
            ordered=ordered,
        )
        tasks.append((payload, owners[row.name]))
    return Planned(group, first, tasks, dropped, direction)


async def revoke_line(
    settings: api.Settings, direction: Direction, tasks: Sequence[tuple[str, str]], ttl_seconds: float, *, client: AsyncMongoClient[Any] | None = None
) -> list[str]:
    """Mark the intents of ``tasks`` (name, task id) ``revoked``: a running one sets ``ctx.cancelled``
    at its next poll, a queued one runs nothing; those already ended are left (returned: the ones marked)."""
    marked = []
    async with api.connect(settings, client=client) as ms:
        for name, task_id in tasks:
            if await ms.intents.settle(intent_key(name, direction), task_id, "revoked", ttl_seconds=ttl_seconds):
                marked.append(name)
    return marked


async def release_line(settings: api.Settings, planned: Planned, *, client: AsyncMongoClient[Any] | None = None) -> None:
    """Free the intents of a plan whose tasks the broker did not take, so that the next enqueue is not dropped."""
    async with api.connect(settings, client=client) as ms:
        for payload, owner in planned.tasks:
            await ms.intents.settle(intent_key(payload.name, payload.direction), owner, None, ttl_seconds=1)


class _Run:
    """One task's run of its migration, on one session (its connection, its check of the own
    collections, its ``cancel``): the intents' reads and writes and the one run share them."""

    def __init__(
        self,
        payload: UpPayload,
        task_id: str,
        options: LineOptions,
        revoked: Callable[[], bool] | None = None,
    ) -> None:
        #: The session's cancel: set when the task is revoked, it stops the run.
        self.cancel = api.CancelSignal()
        #: Whether the worker was told to revoke this task (Celery's own revoke, where the pool sees it).
        self.revoked = revoked
        self.payload = payload
        self.task_id = task_id
        self.options = options
        self.run_id: str | None = None
        self._ms: api.Mongoshift | None = None

    @property
    def ms(self) -> api.Mongoshift:
        assert self._ms is not None, "the task's session is opened by run_up"
        return self._ms

    def result(self, outcome: Any, **fields: Any) -> LineResult:
        """The task's result; ``batch``: what its run recorded, when it ran (else the payload's)."""
        payload = self.payload
        batch = fields.pop("batch", None) or payload.batch
        return LineResult(payload.name, outcome, payload.group, batch, self.run_id, direction=payload.direction, **fields)

    def _observe(self, event: api.Event) -> None:
        if self.run_id is None and event.run_id:
            self.run_id = event.run_id

    @property
    def key(self) -> str:
        return intent_key(self.payload.name, self.payload.direction)

    async def _revoked(self) -> bool:
        """The producer revoked this task (:meth:`~mongoshift.celery.MongoshiftTasks.revoke`), or its worker was told so."""
        if self.revoked is not None and self.revoked():
            return True
        intent = (await self.ms.intents.read([self.key])).get(self.key)
        return intent is not None and intent.owner == self.task_id and intent.state == "revoked"

    async def _watch(self) -> None:
        """While the migration runs: a revocation sets ``ctx.cancelled`` (the body may stop; the run stops at its end)."""
        while not self.cancel.is_set():
            await asyncio.sleep(self.options.poll_seconds)
            try:
                if await self._revoked():
                    self.cancel.set("the task was revoked")
            except MongoshiftError as exc:  # a read that failed is asked again at the next poll
                log.warning("%s: cannot read whether its task was revoked (%s)", self.payload.name, exc.kind)

    async def _hold(self) -> bool:
        """Mark this task's intent running; False when another live task holds the migration (a duplicate), or its task was revoked."""
        key = self.key
        ttl = self.options.intent_ttl_seconds
        if await self.ms.intents.settle(key, self.task_id, "running", ttl_seconds=ttl):
            return True
        if await self._revoked():  # revoked while queued: not taken again
            return False
        # ours lapsed (the queue was slow) or was never written: take it again unless another task holds it now
        claimed = await self.ms.intents.claim([api.Claim(key, self.task_id, ttl, {"group": self.payload.group})])
        return claimed[0] and await self.ms.intents.settle(key, self.task_id, "running", ttl_seconds=ttl)

    async def run(self) -> LineResult | Wait:
        told = self.revoked is not None and self.revoked()  # Celery revoked it before it started here
        if told or not await self._hold():
            if await self._revoked():
                return self.result("failed", code=int(ExitCode.ABORTED), kind="aborted", error=f"{self.payload.name} was not run: its task was revoked")
            return self.result("dropped", kind="duplicate", error="another task holds this migration (queued or running)")
        started = time.monotonic()
        watcher = asyncio.create_task(self._watch())
        try:
            report = await self._command()
        except OutOfOrderError as exc:
            return await self._behind(exc)
        except NotAppliedError as exc:
            if self.payload.direction == "down":  # rolled back already: by another task, or the CLI
                return self.result("skipped")
            return self.result("failed", duration_ms=_ms(started), code=int(exc.exit_code), kind=exc.kind, error=api.redact(exc.message))
        except LockHeldError as exc:
            if time.time() < self.payload.wait_until:
                return Wait(self.options.poll_seconds, "the migration lock is held")
            # it could not run: failed (blocked is for a task behind another migration)
            message = f"{self.payload.name} was not run: the migration lock stayed held until the task gave up ({api.redact(exc.message)})"
            return self.result("failed", code=int(exc.exit_code), kind=exc.kind, error=message)
        except MongoshiftError as exc:
            return self.result("failed", duration_ms=_ms(started), code=int(exc.exit_code), kind=exc.kind, error=api.redact(exc.message))
        except Exception as exc:  # reported as the task's result, redacted, like the CLI's exit 1
            return self.result("failed", duration_ms=_ms(started), code=1, kind="error", error=api.describe_error(exc))
        finally:
            watcher.cancel()
        self.run_id = report.run_id
        mine = [r for r in report.results if r.name == self.payload.name]
        if not mine or mine[-1].status == "skipped":  # already applied: by another task, or the CLI
            return self.result("skipped")
        # the batch the run recorded: a redo's up records a new one (the payload has the batch it was in)
        return self.result(
            "reverted" if mine[-1].status == "reverted" else "applied", duration_ms=sum(r.duration_ms for r in mine), batch=mine[-1].batch
        )

    async def _command(self) -> api.RunReport:
        """The one run of this task: ``up NAME``, ``down NAME`` or ``redo NAME``, refused when the file changed since it was queued."""
        payload = self.payload
        lock = api.Lock(wait=self.options.lock_wait_seconds)
        checksums = {payload.name: payload.checksum} if payload.checksum else None
        if payload.direction == "up":
            return await self.ms.up(payload.name, lock=lock, batch=payload.batch, ordered=payload.ordered, checksums=checksums)
        if payload.direction == "down":
            return await self.ms.down(payload.name, lock=lock, ordered=payload.ordered, checksums=checksums)
        return await self.ms.redo(payload.name, lock=lock, checksums=checksums)

    async def _behind(self, exc: OutOfOrderError) -> LineResult | Wait:
        """Earlier migrations are not applied: wait while their tasks are queued or running, else blocked."""
        ahead = [str(n) for n in exc.details.get("blocked_by") or []]
        keys = {n: intent_key(n, self.payload.direction) for n in ahead}
        intents = await self.ms.intents.read(list(keys.values()))
        coming = [n for n in ahead if (i := intents.get(keys[n])) is not None and i.live]
        if coming and time.time() < self.payload.wait_until:
            return Wait(self.options.poll_seconds, f"waits for {', '.join(coming)}")
        failed = [n for n in ahead if (i := intents.get(keys[n])) is not None and i.state in ("failed", "blocked", "revoked")]
        if coming:
            why = f"gave up waiting for {', '.join(coming)} after line_wait_seconds"
        elif failed:
            why = f"{', '.join(failed)} did not apply"
        else:
            why = f"{', '.join(ahead)} not applied and not queued"
        return self.result("blocked", code=int(exc.exit_code), kind="blocked", error=f"{self.payload.name} was not run: {why}", blocked_by=ahead)

    async def settle(self, outcome: LineResult | Wait) -> None:
        """Free the intent of a done task, keep a failed or blocked one for the tasks behind it, renew a waiting one."""
        key = self.key
        ttl = self.options.intent_ttl_seconds
        if isinstance(outcome, Wait):
            await self.ms.intents.settle(key, self.task_id, "queued", ttl_seconds=ttl)
        elif outcome.outcome in ("applied", "reverted", "skipped"):
            await self.ms.intents.settle(key, self.task_id, None, ttl_seconds=ttl)
        elif outcome.outcome in ("failed", "blocked"):
            data = {"group": self.payload.group, "kind": outcome.kind}
            await self.ms.intents.settle(key, self.task_id, outcome.outcome, ttl_seconds=ttl, data=data)


async def run_up(
    settings: api.Settings,
    payload: UpPayload,
    task_id: str,
    options: LineOptions,
    observers: Sequence[api.Observer] = (),
    revoked: Callable[[], bool] | None = None,
) -> LineResult | Wait:
    """The body of one line task: one session, one ``up NAME`` (``down``, ``redo``; its events to
    ``observers``), the intent settled after; a revocation (``revoked``, or the intent marked
    ``revoked``) sets ``ctx.cancelled``."""
    run = _Run(payload, task_id, options, revoked)
    try:
        async with api.connect(settings, observers=[run._observe, *observers], cancel=run.cancel) as ms:
            run._ms = ms
            outcome = await run.run()
            await run.settle(outcome)
            return outcome
    except MongoshiftError as exc:
        if run._ms is not None:  # the session opened: not a failure to connect
            raise
        # nothing ran: the tasks behind it find this one not applied and its intent live. Only a server out of reach
        # (or a connection string not given yet) is waited out: refused credentials (35), a bad URI or a clash of the
        # own collections stay so until a person acts, and the producer learns it now rather than after the wait
        transient = isinstance(exc, (ConnectionFailedError, UriUnavailableError))
        if transient and time.time() < payload.wait_until:
            # said at each try: Celery's own "retry" line is info, and says neither why nor that nothing ran
            log.warning("%s: not run, %s; the task tries again in %gs, until line_wait_seconds have passed",
                        payload.name, api.redact(exc.message), options.poll_seconds)
            return Wait(options.poll_seconds, f"cannot connect ({exc.kind})")
        return LineResult(
            payload.name, "failed", payload.group, payload.batch, direction=payload.direction, code=int(exc.exit_code), kind=exc.kind,
                error=api.redact(exc.message)
        )


async def refuse_line(settings: api.Settings, payload: UpPayload, task_id: str, options: LineOptions, refused: MongoshiftError) -> LineResult:
    """A task this worker does not take (``register(app, allow=...)``): nothing runs; its intent, when this task
    holds it, is settled ``failed``, so that the tasks behind it end ``blocked`` at once instead of waiting."""
    result = LineResult(
        payload.name, "failed", payload.group, payload.batch, direction=payload.direction, code=int(refused.exit_code), kind=refused.kind,
        error=api.redact(refused.message),
    )
    try:
        async with api.connect(settings) as ms:
            data = {"group": payload.group, "kind": refused.kind}
            await ms.intents.settle(intent_key(payload.name, payload.direction), task_id, "failed", ttl_seconds=options.intent_ttl_seconds, data=data)
    except MongoshiftError as exc:  # the refusal stands; the intent lapses after intent_ttl_seconds
        log.warning("%s: its refused task's intent could not be settled (%s)", payload.name, exc.kind)
    return result


async def abandon_line(settings: api.Settings, payload: UpPayload, task_id: str, options: LineOptions) -> None:
    """A task whose worker process died in it: its intent, when this task still holds it, is settled ``failed``
    (``aborted``), so that the tasks behind it end ``blocked`` at once; the changelog says whether its body finished."""
    async with api.connect(settings) as ms:
        data = {"group": payload.group, "kind": "aborted"}
        await ms.intents.settle(intent_key(payload.name, payload.direction), task_id, "failed", ttl_seconds=options.intent_ttl_seconds, data=data)


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
