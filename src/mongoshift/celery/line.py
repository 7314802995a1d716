"""The migration line on a job system: what ``enqueue_up`` puts in the queue, and what each task does.

MongoDB holds the truth, the broker only the intent. Each task runs exactly one migration
with ``up NAME --ordered`` in the group's batch, under the migration lock, so that the
changelog decides: an applied migration is ``skipped``; one whose predecessors are not
applied waits while their tasks are queued or running (their intents, :mod:`mongoshift.api.intents`),
and is ``blocked`` once one of them failed, or was never queued. A migration body is never
retried here: a waiting task asks again later, a failed one reports and stays failed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pymongo import AsyncMongoClient

from .. import api
from ..errors import LockHeldError, MongoshiftError, OutOfOrderError
from .payloads import UpPayload
from .results import LineResult


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


def intent_key(name: str) -> str:
    return f"up:{name}"


async def plan_line(settings: api.Settings, options: LineOptions, *, client: AsyncMongoClient[Any] | None = None) -> Planned:
    """The pending migrations in order, each claimed for a new task id; one queued or running elsewhere is dropped.

    The plan is ``dry-run up``'s, so a file that does not import or a bad selection fails here,
    before anything is queued."""
    own = client is None
    connected = client if client is not None else await api.open_client(settings)  # one connection for both calls
    try:
        preview = await api.dry_run(settings, "up", client=connected)
        group = uuid.uuid4().hex
        batch = preview.rows[0].batch if preview.rows else None
        wait_until = time.time() + options.line_wait_seconds
        owners = {row.name: uuid.uuid4().hex for row in preview.rows}
        claims = [
            api.Claim(intent_key(name), owner, options.intent_ttl_seconds, {"group": group, "batch": batch})
            for name, owner in owners.items()
        ]
        taken = await api.claim_intents(settings, claims, client=connected)
    finally:
        if own:
            await connected.close()
    tasks, dropped = [], []
    for (name, owner), ok in zip(owners.items(), taken, strict=True):
        if not ok:
            dropped.append(name)
            continue
        assert batch is not None
        tasks.append((UpPayload(name=name, group=group, batch=batch, wait_until=wait_until), owner))
    return Planned(group, batch, tasks, dropped)


async def release_line(settings: api.Settings, planned: Planned, *, client: AsyncMongoClient[Any] | None = None) -> None:
    """Free the intents of a plan whose tasks the broker did not take, so that the next enqueue is not dropped."""
    for payload, owner in planned.tasks:
        await api.settle_intent(settings, intent_key(payload.name), owner, None, ttl_seconds=1, client=client)


class _Run:
    """One task's run of its migration, on one client."""

    def __init__(
        self,
        settings: api.Settings,
        payload: UpPayload,
        task_id: str,
        options: LineOptions,
        client: AsyncMongoClient[Any],
        observers: Sequence[api.Observer] = (),
    ) -> None:
        self.settings = settings
        self.observers = observers
        self.payload = payload
        self.task_id = task_id
        self.options = options
        self.client = client
        self.run_id: str | None = None

    def result(self, outcome: Any, **fields: Any) -> LineResult:
        return LineResult(self.payload.name, outcome, self.payload.group, self.payload.batch, self.run_id, **fields)

    def _observe(self, event: api.Event) -> None:
        if self.run_id is None and event.run_id:
            self.run_id = event.run_id

    async def _hold(self) -> bool:
        """Mark this task's intent running; False when another live task holds the migration (a duplicate)."""
        key = intent_key(self.payload.name)
        ttl = self.options.intent_ttl_seconds
        if await api.settle_intent(self.settings, key, self.task_id, "running", ttl_seconds=ttl, client=self.client):
            return True
        # ours lapsed (the queue was slow) or was never written: take it again unless another task holds it now
        claimed = await api.claim_intents(self.settings, [api.Claim(key, self.task_id, ttl, {"group": self.payload.group})], client=self.client)
        return claimed[0] and await api.settle_intent(self.settings, key, self.task_id, "running", ttl_seconds=ttl, client=self.client)

    async def run(self) -> LineResult | Wait:
        if not await self._hold():
            return self.result("dropped", kind="duplicate", error="another task holds this migration (queued or running)")
        started = time.monotonic()
        try:
            report = await api.up(
                self.settings,
                target=self.payload.name,
                batch=self.payload.batch,
                ordered=True,
                wait=self.options.lock_wait_seconds,
                observers=[self._observe, *self.observers],
                client=self.client,
            )
        except OutOfOrderError as exc:
            return await self._behind(exc)
        except LockHeldError as exc:
            if time.time() < self.payload.wait_until:
                return Wait(self.options.poll_seconds, "the migration lock is held")
            return self.result("blocked", code=int(exc.exit_code), kind=exc.kind, error=api.redact(exc.message))
        except MongoshiftError as exc:
            return self.result("failed", duration_ms=_ms(started), code=int(exc.exit_code), kind=exc.kind, error=api.redact(exc.message))
        except Exception as exc:  # noqa: BLE001 - reported as the task's result, redacted, like the CLI's exit 1
            return self.result("failed", duration_ms=_ms(started), code=1, kind="error", error=api.describe_error(exc))
        self.run_id = report.run_id
        mine = [r for r in report.results if r.name == self.payload.name]
        if not mine or mine[0].status == "skipped":  # already applied: by another task, or the CLI
            return self.result("skipped")
        return self.result("applied", duration_ms=mine[0].duration_ms)

    async def _behind(self, exc: OutOfOrderError) -> LineResult | Wait:
        """Earlier migrations are not applied: wait while their tasks are queued or running, else blocked."""
        ahead = [str(n) for n in exc.details.get("blocked_by") or []]
        intents = await api.read_intents(self.settings, [intent_key(n) for n in ahead], client=self.client)
        coming = [n for n in ahead if (i := intents.get(intent_key(n))) is not None and i.live]
        if coming and time.time() < self.payload.wait_until:
            return Wait(self.options.poll_seconds, f"waits for {', '.join(coming)}")
        failed = [n for n in ahead if (i := intents.get(intent_key(n))) is not None and i.state in ("failed", "blocked")]
        if coming:
            why = f"gave up waiting for {', '.join(coming)} after line_wait_seconds"
        elif failed:
            why = f"{', '.join(failed)} did not apply"
        else:
            why = f"{', '.join(ahead)} not applied and not queued"
        return self.result("blocked", code=int(exc.exit_code), kind="blocked", error=f"{self.payload.name} was not run: {why}", blocked_by=ahead)

    async def settle(self, outcome: LineResult | Wait) -> None:
        """Free the intent of a done task, keep a failed or blocked one for the tasks behind it, renew a waiting one."""
        key = intent_key(self.payload.name)
        ttl = self.options.intent_ttl_seconds
        if isinstance(outcome, Wait):
            await api.settle_intent(self.settings, key, self.task_id, "queued", ttl_seconds=ttl, client=self.client)
        elif outcome.outcome in ("applied", "skipped"):
            await api.settle_intent(self.settings, key, self.task_id, None, ttl_seconds=ttl, client=self.client)
        elif outcome.outcome in ("failed", "blocked"):
            data = {"group": self.payload.group, "kind": outcome.kind}
            await api.settle_intent(self.settings, key, self.task_id, outcome.outcome, ttl_seconds=ttl, data=data, client=self.client)


async def run_up(
    settings: api.Settings, payload: UpPayload, task_id: str, options: LineOptions, observers: Sequence[api.Observer] = ()
) -> LineResult | Wait:
    """The body of one line task: one client, one ``up NAME --ordered`` (its events to ``observers``), the intent settled after."""
    try:
        client = await api.open_client(settings)
    except MongoshiftError as exc:  # nothing ran: the tasks behind it find this one not applied and its intent live
        if time.time() < payload.wait_until:
            return Wait(options.poll_seconds, f"cannot connect ({exc.kind})")
        return LineResult(payload.name, "failed", payload.group, payload.batch, code=int(exc.exit_code), kind=exc.kind, error=api.redact(exc.message))
    try:
        run = _Run(settings, payload, task_id, options, client, observers)
        outcome = await run.run()
        await run.settle(outcome)
        return outcome
    finally:
        await client.close()


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
