"""One call, :func:`register`, puts mongoshift's tasks on the application's Celery app.

The worker finds the project the way the CLI does, or the way registration says: ``settings``
(a :class:`~mongoshift.api.Settings`, or a function returning one, called per task), else
``config`` (the project file's path), else ``MONGOSHIFT_CONFIG`` / the working directory of
the worker. The application module that calls :func:`register` is imported by the producers
and by every worker, so both sides agree on it. Each task opens one connection, makes its
calls through :mod:`mongoshift.api` and closes it.

Every task is ``acks_late`` (a message is removed only once its task ended) and has no
automatic retry: a task that has to wait (for the lock, for the tasks ahead of it, for its
next slice or step) re-sends itself with a countdown, keeping its id; a migration body
that ran is never run again by mongoshift.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from celery import Celery, Task, group, signals
from celery.exceptions import TaskRevokedError, TimeoutError as CeleryTimeoutError, WorkerLostError
from celery.result import AsyncResult, GroupResult
from celery.worker import state as worker_state
from pymongo import AsyncMongoClient

from .. import api
from ..errors import (
    ConfigInvalidError,
    ExitCode,
    LockHeldError,
    MigrationTimeoutError,
    MongoshiftError,
    TaskInvalidError,
    TaskRefusedError,
    TenantsInvalidError,
)
from . import background as bg
from .checks import check_number
from .line import Direction, LineOptions, Planned, Wait, abandon_line, plan_line, refuse_line, release_line, revoke_line, run_up
from .payloads import CoordinatorPayload, LanePayload, TenantPayload, UpPayload, parse
from .results import BackgroundResult, LineResult

log = logging.getLogger("mongoshift.celery")

#: Where a worker gets the project's settings: the settings, a function returning them, or a project file.
SettingsSource = api.Settings | Callable[[], api.Settings] | str | Path | None

#: The kinds of line task a worker may take (``register(app, allow=...)``): the line forward in order (``up``),
#: rollbacks (``down``), ``redo``, and one file run on its own, outside the line's order (``unordered``).
LINE_KINDS = frozenset({"up", "down", "redo", "unordered"})
#: The one other consent: a converge queued with ``yes=True`` rebuilds and drops indexes (``--yes``), which a
#: plain converge refuses (exit 42); anyone who can write to the broker can queue that too.
CONVERGE_DESTRUCTIVE = "converge_destructive"
#: Every kind ``allow`` takes.
TASK_KINDS = LINE_KINDS | {CONVERGE_DESTRUCTIVE}
#: What a worker takes unless its registration says more: the line forward, in order. Anyone who can write to
#: the broker can queue a task, so a rollback or a file run out of order needs the worker's own consent.
DEFAULT_ALLOW = frozenset({"up"})
#: What each kind is, in a refusal's message.
_KIND_WORDS = {
    "up": "the line's migrations", "down": "rollbacks", "redo": "redos", "unordered": "one file run outside the line's order",
    CONVERGE_DESTRUCTIVE: "a converge's destructive steps (yes=True: rebuilds and drops)",
}


def _run[T](coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on a loop of its own, also when the caller's thread runs a loop (an async application)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mongoshift-celery") as pool:
        return pool.submit(asyncio.run, coro).result()


@dataclass
class LineGroup:
    """What :meth:`MongoshiftTasks.enqueue_up` (``enqueue_down``, ``enqueue_redo``) queued: one task per migration, in order.

    ``batch``: the batch an ``up`` line records, or the batch of the first migration a rollback takes."""

    group: str
    batch: int | None
    names: list[str]
    #: Pending migrations not queued because a task already holds them (queued or running).
    dropped: list[str] = field(default_factory=list)
    result: GroupResult | None = None
    #: The task id of each migration of ``names``.
    task_ids: list[str] = field(default_factory=list)
    #: What its tasks run: ``up``, ``down`` or ``redo``.
    direction: Direction = "up"

    def wait(self, timeout: float | None = None, interval: float = 0.2) -> list[LineResult]:
        """The results in the line's order, once every task ended (a task refused by its worker is ``failed``).

        ``timeout``: seconds in all; past it, :class:`~mongoshift.errors.MigrationTimeoutError` (exit 14)
        naming the migrations still running; the tasks go on."""
        _check_wait(timeout, interval)
        if self.result is None:
            return []
        try:
            values = self.result.join(timeout=timeout, propagate=False, interval=interval)
        except (TimeoutError, CeleryTimeoutError):
            unfinished = [n for n, r in zip(self.names, self.result.results, strict=True) if not r.ready()]
            raise MigrationTimeoutError(
                f"the line's tasks did not all end within {timeout:g}s: {', '.join(unfinished)} still queued or running",
                group=self.group,
                unfinished=unfinished,
            ) from None
        return [self._read(name, value) for name, value in zip(self.names, values, strict=True)]

    def _read(self, name: str, value: Any) -> LineResult:
        if isinstance(value, dict):
            return LineResult.of(value)
        if isinstance(value, TaskRevokedError):  # revoked before its worker ran it
            return LineResult(name, "failed", self.group, self.batch, direction=self.direction, code=int(ExitCode.ABORTED), kind="aborted",
                error="its task was revoked")
        if isinstance(value, WorkerLostError):  # its pool child died in the body (a kill -9, the OOM killer): no bug of ours
            return LineResult(name, "failed", self.group, self.batch, direction=self.direction, code=int(ExitCode.ABORTED), kind="aborted",
                error=f"{api.redact(str(value))}: the worker process running it ended before it did; the changelog says whether "
                "its body finished, and the tasks behind it end blocked by it")
        kind = getattr(value, "kind", "error")
        code = int(getattr(value, "exit_code", 1))
        return LineResult(name, "failed", self.group, self.batch, direction=self.direction, code=code, kind=kind, error=api.redact(str(value)))


@dataclass
class BackgroundStart:
    """What :meth:`MongoshiftTasks.start_background` did: ``result`` (the chain's last word) when a chain started."""

    name: str
    started: bool
    chain: str | None = None
    result: AsyncResult | None = None

    def wait(self, timeout: float | None = None) -> BackgroundResult:
        """The migration's status when the chain stopped (``completed``, ``failed``, ``paused``, ...)."""
        _check_wait(timeout)
        if self.result is None:
            raise ConfigInvalidError(f"{self.name}: no chain was started here (another one runs it)")
        try:
            return BackgroundResult(**self.result.get(timeout=timeout))
        except (TimeoutError, CeleryTimeoutError):  # as LineGroup.wait says it (Celery's own error had no exit code)
            raise MigrationTimeoutError(f"{self.name}: its chain did not stop within {timeout:g}s (it goes on)", unfinished=[self.name]) from None


@dataclass
class TenantGroup:
    """What :meth:`MongoshiftTasks.enqueue_tenants` queued: one task per tenant database, in selection order."""

    command: str
    group: str
    names: list[str]
    task_ids: list[str]
    result: GroupResult | None = None

    def wait(self, timeout: float | None = None, interval: float = 0.2) -> api.RolloutReport:
        """Every tenant's row once its task ended: a :class:`~mongoshift.api.RolloutReport` whose ``exit_code`` is 0,
        or 47 when a tenant failed or stayed locked."""
        _check_wait(timeout, interval)
        try:
            values = self.result.get(timeout=timeout, interval=interval, propagate=False) if self.result is not None else []
        except (TimeoutError, CeleryTimeoutError):  # as LineGroup.wait says it (Celery's own error had no exit code)
            assert self.result is not None
            unfinished = [n for n, r in zip(self.names, self.result.results, strict=True) if not r.ready()]
            raise MigrationTimeoutError(
                f"the tenants' tasks did not all end within {timeout:g}s: {', '.join(unfinished)} still queued or running",
                group=self.group, unfinished=unfinished,
            ) from None
        return api.RolloutReport(self.command, [_tenant_row(name, value) for name, value in zip(self.names, values, strict=True)])


def _check_wait(timeout: object, interval: object = 0.2) -> None:
    """A ``wait()``'s seconds: a NaN timeout waited for ever (no time is past it), a text failed in Celery's arithmetic,
    and a negative one was "did not end within -1s"; refused (exit 6) instead."""
    if timeout is not None:
        check_number("wait()", "timeout", timeout, minimum=0)
    check_number("wait()", "interval", interval, minimum=0, above=True)


def _tenant_row(name: str, value: Any) -> api.TenantRow:
    """A tenant task's result as a row; a task that raised (a payload refused) is a failed row."""
    if isinstance(value, dict) and value.get("name") == name:
        error = value.get("error")
        return api.TenantRow(
            name, value.get("outcome", "failed"), applied=int(value.get("applied") or 0), rolled_back=int(value.get("rolled_back") or 0),
            duration_ms=value.get("duration_ms"), error=api.TenantError(**error) if isinstance(error, dict) else None, result=value.get("result"),
        )
    if isinstance(value, MongoshiftError):
        return api.TenantRow(name, "failed", error=api.TenantError(value.kind, int(value.exit_code), api.redact(value.message)))
    return api.TenantRow(name, "failed", error=api.TenantError("error", int(ExitCode.UNEXPECTED), f"the task ended with {type(value).__name__}"))


class MongoshiftTasks:
    """The tasks :func:`register` put on an app, and the calls that queue them."""

    def __init__(
        self,
        app: Celery,
        settings: SettingsSource,
        prefix: str,
        queue: str | None,
        line: LineOptions,
        background: bg.BackgroundOptions,
        observers: Sequence[api.Observer] = (),
        allow: frozenset[str] = DEFAULT_ALLOW,
    ) -> None:
        self.app = app
        #: The kinds of line task this registration takes (:data:`LINE_KINDS`); its workers refuse the others.
        self.allow = allow
        self.observers = tuple(observers)
        self.prefix = prefix
        self.queue = queue
        self.line = line
        self.background = background
        self._source = settings
        if queue:
            self._route_to(queue)
        self.up = self._task("up", self._line, reject_on_worker_lost=False)
        self.down = self._task("down", self._line, reject_on_worker_lost=False)
        self.redo = self._task("redo", self._line, reject_on_worker_lost=False)
        self._line_tasks = {"up": self.up, "down": self.down, "redo": self.redo}
        self.coordinator = self._task("background.coordinate", self._coordinate)
        self.lane = self._task("background.lane", self._lane)
        self.background_tick = self._task("background.tick", self._tick)
        self.converge = self._task("converge", self._converge)
        self.verify = self._task("background.verify", self._verify)
        self.audit = self._task("audit", self._audit)
        self.tenant = self._task("tenant", self._tenant, reject_on_worker_lost=False)
        # sent by the worker's main process when a pool child died in a line task (not redelivered, see _lost)
        signals.task_failure.connect(self._lost, weak=False)

    # -- settings -----------------------------------------------------------------------------

    def settings(self) -> api.Settings:
        """The project's settings as registration says (read per task, so a deploy's change is seen)."""
        source = self._source
        if isinstance(source, api.Settings):
            return source
        if callable(source):
            value = source()
            if not isinstance(value, api.Settings):
                raise ConfigInvalidError(f"the settings function given to register() returned a {type(value).__name__}, not Settings")
            return value
        return api.load_settings(config_path=Path(source) if source is not None else None)

    # -- registration -------------------------------------------------------------------------

    def _task(self, name: str, body: Callable[..., Any], *, reject_on_worker_lost: bool = True) -> Task:
        options: dict[str, Any] = {
            "name": f"{self.prefix}.{name}",
            "bind": True,
            "acks_late": True,
            # A running task reads STARTED in the result backend, not PENDING: Celery's revoke is broadcast to every
            # worker of the broker, and a worker that does not run the task marks a PENDING one REVOKED, so a
            # LineGroup.wait() elsewhere would read "revoked" while the body still runs and writes.
            "track_started": True,
            "reject_on_worker_lost": reject_on_worker_lost,
            "max_retries": None,
            "autoretry_for": (),
            "typing": False,  # the payload is validated by its model, with a better message
            "shared": False,  # on this app only: another app of the process gets its own registration
        }

        accepts = inspect.signature(body)

        def run(task: Task, *args: Any, **kwargs: Any) -> Any:  # a plain function: Celery binds the task to it
            try:
                accepts.bind(task, *args, **kwargs)
            except TypeError as exc:  # "typing" is off: a message without its payload, or with more, would be a bare TypeError
                raise TaskInvalidError(f"{task.name}: the message's arguments do not fit the task ({exc})", task=task.name) from None
            return body(task, *args, **kwargs)

        run.__name__ = run.__qualname__ = name.replace(".", "_")
        return self.app.task(**options)(run)

    def _route_to(self, queue: str) -> None:
        """Put a router for this registration's tasks first in the app's ``task_routes``, so that a plain
        ``.delay()`` (verify, audit, converge) goes to ``queue`` too. (A task's own ``queue`` attribute,
        which did this before, is deprecated by Celery and has no effect from Celery 6.)"""
        prefix = f"{self.prefix}."

        def route(name: str, args: Any, kwargs: Any, options: Any, task: Any = None, **rest: Any) -> dict[str, str] | None:
            return {"queue": queue} if isinstance(name, str) and name.startswith(prefix) else None

        routes = self.app.conf.task_routes
        theirs: tuple[Any, ...] = () if routes is None else tuple(routes) if isinstance(routes, list | tuple) else (routes,)
        self.app.conf.task_routes = (route, *theirs)
        if "amqp" in vars(self.app):  # the app has routed a message already: its router read the routes then
            self.app.amqp.flush_routes()
            self.app.amqp.router.routes = self.app.amqp.routes

    def _routing(self) -> dict[str, Any]:
        """Where a message goes: the registration's queue, else the app's routes (a retry keeps its queue)."""
        return {"queue": self.queue} if self.queue else {}

    def _send(self, task: Task, payload: dict[str, Any]) -> AsyncResult:
        return task.apply_async(args=(payload,), **self._routing())

    # -- the line -----------------------------------------------------------------------------

    async def aenqueue_up(self, target: str | None = None, *, to: str | None = None, client: AsyncMongoClient[Any] | None = None) -> LineGroup:
        """:meth:`enqueue_up` for an async application (``client``: its open ``AsyncMongoClient``)."""
        return await self._aenqueue(client, direction="up", target=target, to=to)

    def enqueue_up(self, target: str | None = None, *, to: str | None = None) -> LineGroup:
        """Queue one task per pending migration, in order, as one group sharing the next batch.

        ``target``: that one file only (``up FILE``: earlier pending files do not hold it);
        ``to``: the pending files up to that one, included (``up --to``). A migration another
        task holds (queued or running) is dropped (``LineGroup.dropped``). When the broker
        refuses the group, the intents are released again and the broker's error raised."""
        return self._enqueue(direction="up", target=target, to=to)

    async def aenqueue_down(
        self,
        target: str | None = None,
        *,
        batch: int | None = None,
        steps: int | None = None,
        to: str | None = None,
        client: AsyncMongoClient[Any] | None = None,
    ) -> LineGroup:
        """:meth:`enqueue_down` for an async application."""
        return await self._aenqueue(client, direction="down", target=target, batch=batch, steps=steps, to=to)

    def enqueue_down(self, target: str | None = None, *, batch: int | None = None, steps: int | None = None, to: str | None = None) -> LineGroup:
        """Queue one rollback task per migration that ``mongoshift down`` would roll back, newest first.

        The selection is ``down``'s (the last batch by default; ``target``, ``batch``, ``steps``,
        ``to``), fixed when queued: each task runs ``down NAME --ordered`` (``down FILE`` for
        ``target``), so a message delivered twice finds its migration rolled back (``skipped``)."""
        return self._enqueue(direction="down", target=target, batch=batch, steps=steps, to=to)

    async def aenqueue_redo(self, target: str | None = None, *, client: AsyncMongoClient[Any] | None = None) -> LineGroup:
        """:meth:`enqueue_redo` for an async application."""
        return await self._aenqueue(client, direction="redo", target=target)

    def enqueue_redo(self, target: str | None = None) -> LineGroup:
        """Queue ``redo`` of one migration (``target``, else the newest applied, chosen now): one task."""
        return self._enqueue(direction="redo", target=target)

    def refusal(self, task: str, kinds: Iterable[str], *, queuing: bool = False) -> TaskRefusedError | None:
        """The error of a task whose ``kinds`` this registration does not allow; None when it takes them all.
        ``queuing``: said to the producer, which queues nothing (no worker was asked: "this worker" was wrong there)."""
        missing = [k for k in kinds if k not in self.allow]
        if not missing:
            return None
        allowed = ", ".join(sorted(self.allow)) or "nothing"
        who, outcome = ("this registration's workers do", "queued") if queuing else ("this worker does", "run")
        return TaskRefusedError(
            f"{task}: {who} not take {' or '.join(_KIND_WORDS[k] for k in missing)}, so nothing was {outcome}; "
            f"its register(app, allow=...) takes {allowed} (add {', '.join(repr(k) for k in missing)} to take it; docs/celery.md)",
            task=task, refused=missing,
        )

    def _refuse_early(self, direction: Direction, target: str | None) -> None:
        """What the workers of this registration would refuse is refused when queued, before anything is claimed."""
        kinds = (direction,) if target is None or direction == "redo" else (direction, "unordered")
        refused = self.refusal(self._line_tasks[direction].name, kinds, queuing=True)
        if refused is not None:
            raise refused

    async def _aenqueue(self, client: AsyncMongoClient[Any] | None, **selection: Any) -> LineGroup:
        self._refuse_early(selection["direction"], selection.get("target"))
        settings = self.settings()
        planned = await plan_line(settings, self.line, client=client, **selection)
        try:
            return self._queue_line(planned)
        except Exception:
            await release_line(settings, planned, client=client)
            raise

    def _enqueue(self, **selection: Any) -> LineGroup:
        self._refuse_early(selection["direction"], selection.get("target"))
        settings = self.settings()
        planned = _run(plan_line(settings, self.line, **selection))
        try:
            return self._queue_line(planned)
        except Exception:
            _run(release_line(settings, planned))
            raise

    def _queue_line(self, planned: Planned) -> LineGroup:
        names = [payload.name for payload, _ in planned.tasks]
        line = LineGroup(planned.group, planned.batch, names, planned.dropped, task_ids=[task_id for _, task_id in planned.tasks], direction=planned.direction)
        if planned.tasks:
            signatures = [
                self._line_tasks[payload.direction].signature(args=(payload.model_dump(),), task_id=task_id, immutable=True, **self._routing())
                for payload, task_id in planned.tasks
            ]
            line.result = group(signatures).apply_async()
        return line

    def revoke(self, line: LineGroup) -> list[str]:
        """Revoke the tasks of ``line``: a running one gets ``ctx.cancelled`` set (within ``poll_seconds``;
        the body may stop, and the run stops after it), a queued one runs nothing (``failed``, ``aborted``).

        Returns the migrations whose tasks had not ended. Celery's own ``revoke()`` reaches a
        running task only where the pool sees it (``-P threads``); this works on every pool."""
        settings = self.settings()
        pending = list(zip(line.names, line.task_ids, strict=True))
        marked = _run(revoke_line(settings, line.direction, pending, self.line.intent_ttl_seconds))
        if line.task_ids:
            self.app.control.revoke(line.task_ids)
        return marked

    def _line(self, task: Task, payload: Any) -> dict[str, Any]:
        parsed = parse(UpPayload, task.name, payload)
        if self._line_tasks[parsed.direction].name != task.name:
            raise TaskInvalidError(f"{task.name}: a payload of direction {parsed.direction} belongs to another task", task=task.name)
        refused = self.refusal(task.name, parsed.kinds)
        if refused is not None:  # queued without this worker's consent (any producer can write to the broker): recorded, not run
            log.warning("%s: refused %s (%s)", task.name, parsed.name, refused.kind)
            try:
                settings = self.settings()
            except MongoshiftError:
                return LineResult(parsed.name, "failed", parsed.group, parsed.batch, direction=parsed.direction, code=int(refused.exit_code),
                                  kind=refused.kind, error=api.redact(refused.message)).to_json()
            return _run(refuse_line(settings, parsed, task.request.id, self.line, refused)).to_json()
        try:
            task_id = task.request.id
            outcome = _run(run_up(self.settings(), parsed, task_id, self.line, self.observers, lambda: task_id in worker_state.revoked))
        except MongoshiftError as exc:  # the settings: nothing ran
            outcome = LineResult(
                parsed.name, "failed", parsed.group, parsed.batch, direction=parsed.direction, code=int(exc.exit_code), kind=exc.kind,
                    error=api.redact(exc.message)
            )
        if isinstance(outcome, Wait):
            raise task.retry(args=(payload,), countdown=outcome.countdown, max_retries=None)
        return outcome.to_json()

    def _lost(self, sender: Any = None, task_id: str | None = None, exception: BaseException | None = None, args: Any = None, **_: Any) -> None:
        """A pool child died in a line task (``kill -9``, the OOM killer): its message is not redelivered
        (``reject_on_worker_lost`` is off), so the task is over. Its intent, left ``running``, held the migration
        for ``intent_ttl_seconds``, and the tasks behind it waited as long (an hour by default) before ending
        ``blocked``: it is settled ``failed`` (``aborted``) now, by the worker's main process, which saw it die."""
        if not isinstance(exception, WorkerLostError) or task_id is None or getattr(sender, "app", None) is not self.app:
            return
        if getattr(sender, "name", None) not in {t.name for t in self._line_tasks.values()} or not isinstance(args, (list, tuple)) or len(args) != 1:
            return
        try:
            parsed = parse(UpPayload, sender.name, args[0])
            _run(abandon_line(self.settings(), parsed, task_id, self.line))
        except Exception as exc:  # the intent lapses after intent_ttl_seconds, as before; a signal handler never raises
            log.warning("%s: the intent of a task whose worker process died could not be settled (%s)", sender.name, getattr(exc, "kind", type(exc).__name__))

    # -- background ---------------------------------------------------------------------------

    def start_background(self, name: str, *, lanes: int = 1) -> BackgroundStart:
        """Start the coordinator chain of a registered background migration, unless one already runs it.

        A name ``mongoshift up`` never registered is refused here (:class:`~mongoshift.errors.NotAppliedError`,
        exit 9, as by every background command), before anything is queued or held.

        ``lanes``: lane tasks the chain keeps at most (1 to 64; the file's ``max_parallel`` caps them too)."""
        if isinstance(lanes, bool) or not isinstance(lanes, int) or not 1 <= lanes <= 64:
            raise ConfigInvalidError(f"lanes must be an integer from 1 to 64, not {lanes!r}")
        settings = self.settings()
        chain = uuid.uuid4().hex
        payload = CoordinatorPayload(name=_file_name(name), chain=chain, lanes=lanes)
        claim = api.Claim(bg.chain_key(payload.name), chain, self.background.chain_ttl_seconds)
        if not _run(bg.claim_chain(settings, payload.name, claim)):
            return BackgroundStart(payload.name, False)
        try:
            sent = self._send(self.coordinator, payload.model_dump())
        except Exception:
            _run(api.settle_intent(settings, claim.key, chain, None, ttl_seconds=claim.ttl_seconds))
            raise
        return BackgroundStart(payload.name, True, chain, sent)

    def _coordinate(self, task: Task, payload: Any) -> dict[str, Any]:
        parsed = parse(CoordinatorPayload, task.name, payload)
        settings = self.settings()
        tick = _run(bg.coordinate(settings, parsed, self.background, self.observers))
        for _ in range(tick.lanes):
            self._send(self.lane, LanePayload(name=parsed.name, chain=parsed.chain).model_dump())
        if isinstance(tick.next, bg.Again):
            raise task.retry(args=(tick.next.payload.model_dump(),), countdown=tick.next.countdown, max_retries=None)
        return tick.next.to_json()

    def _lane(self, task: Task, payload: Any) -> dict[str, Any]:
        parsed = parse(LanePayload, task.name, payload)
        outcome = _run(bg.lane(self.settings(), parsed, self.background, self.observers))
        if isinstance(outcome, bg.Again):
            raise task.retry(args=(outcome.payload.model_dump(),), countdown=outcome.countdown, max_retries=None)
        return outcome.to_json()

    def _tick(self, task: Task) -> list[str]:
        """The beat's background tick: start a chain for every runnable migration that has none."""
        reports = _run(api.background_status(self.settings()))
        started = []
        for report in reports:
            if report.status in ("blocked", "pending", "running") and self.start_background(report.name).started:
                started.append(report.name)
        return started

    # -- tenants ------------------------------------------------------------------------------

    def enqueue_tenants(self, command: str = "up", tenants: api.Tenants | None = None) -> TenantGroup:
        """Fan ``command`` (``up``, ``down``: the last batch, ``converge``) out as one task per selected tenant
        database (``tenants``: default every tenant of ``[tenants]``), queued now as one group (docs/tenants.md).

        The selection is made here and refused here (:class:`~mongoshift.errors.TenantsInvalidError`, 46) before
        anything is queued. The workers' concurrency bounds how many tenants run at once, and every tenant's task
        runs whatever another's outcome: ``canary`` is refused (queue the canaries first, wait, then the rest);
        ``parallel`` and ``continue_on_error`` do not apply. A tenant whose lock is held waits as a line task does
        (``lock_wait_seconds`` at a time, for at most ``line_wait_seconds``), then ends ``locked``."""
        if command not in ("up", "down", "converge"):
            raise ConfigInvalidError(f"enqueue_tenants runs up, down or converge, not {command!r}")
        tenants = api.Tenants(all=True) if tenants is None else tenants
        if not isinstance(tenants, api.Tenants):
            raise ConfigInvalidError(f"tenants must be a mongoshift Tenants(...), not {type(tenants).__name__}")
        if command == "down" and (refused := self.refusal(self.tenant.name, ("down",), queuing=True)) is not None:
            raise refused
        if tenants.canary:
            raise TenantsInvalidError(
                "a Celery fan-out has no canary: queue the canaries with Tenants(names=[...]), wait for them, then queue the rest"
            )
        selected = _run(api.select_tenants(self.settings(), tenants))
        group_id = uuid.uuid4().hex
        wait_until = time.time() + self.line.line_wait_seconds
        payloads = [TenantPayload(command=command, tenant=t.name, group=group_id, wait_until=wait_until) for t in selected]  # type: ignore[arg-type]
        task_ids = [uuid.uuid4().hex for _ in payloads]
        fanned = TenantGroup(command, group_id, [t.name for t in selected], task_ids)
        signatures = [
            self.tenant.signature(args=(p.model_dump(),), task_id=task_id, immutable=True, **self._routing())
            for p, task_id in zip(payloads, task_ids, strict=True)
        ]
        fanned.result = group(signatures).apply_async()
        return fanned

    def _tenant(self, task: Task, payload: Any) -> dict[str, Any]:
        from ..api.tenants import judge_done, judge_run, tenant_settings

        parsed = parse(TenantPayload, task.name, payload)
        row = api.TenantRow(parsed.tenant)
        if parsed.command == "down" and (refused := self.refusal(task.name, ("down",))) is not None:
            log.warning("%s: refused a rollback of tenant %s (%s)", task.name, parsed.tenant, refused.kind)
            row.outcome, row.error = "failed", api.TenantError(refused.kind, int(refused.exit_code), api.redact(refused.message))
            return row.to_json(result=lambda r: r)
        started = time.monotonic()
        try:
            settings = self.settings()
            # found again here: the tenant must still be selected, and its cluster's URI never crosses the broker
            [tenant] = _run(api.select_tenants(settings, api.Tenants(names=[parsed.tenant])))
            own = tenant_settings(settings, tenant)
            lock = api.Lock(wait=self.line.lock_wait_seconds)
            if parsed.command == "converge":
                judged = judge_done(_run(api.converge(own, lock=lock, observers=self.observers)))
                changed = sum(1 for r in judged.result.results if r.action.action != "unchanged")
                judged.outcome, judged.result = ("done" if changed else "already at target"), judged.result.to_json()
            else:
                call = api.up if parsed.command == "up" else api.down
                judged = judge_run(_run(call(own, lock=lock, observers=self.observers)))
                judged.result = judged.result.to_json()
            row.outcome, row.applied, row.rolled_back, row.result = judged.outcome, judged.applied, judged.rolled_back, judged.result
        except LockHeldError as exc:
            if time.time() < parsed.wait_until:
                raise task.retry(args=(payload,), countdown=self.line.poll_seconds, max_retries=None) from None
            row.outcome, row.error = "locked", api.TenantError(exc.kind, int(exc.exit_code), api.redact(exc.message))
        except MongoshiftError as exc:
            row.outcome, row.error = "failed", api.TenantError(exc.kind, int(exc.exit_code), api.redact(exc.message))
            results = exc.details.get("results")
            statuses = [r.get("status") for r in results if isinstance(r, dict)] if isinstance(results, list) else []
            row.applied, row.rolled_back = statuses.count("applied"), statuses.count("reverted")
        row.duration_ms = int((time.monotonic() - started) * 1000)
        return row.to_json(result=lambda r: r)

    # -- converge, verify, audit --------------------------------------------------------------

    def enqueue_converge(self, *, yes: bool = False) -> AsyncResult:
        """Queue a converge of the declared collections (``yes``: its destructive steps too).

        Like a line task, it waits for a held migration lock (``lock_wait_seconds`` at a time,
        asking again after ``poll_seconds``) for at most ``line_wait_seconds``. ``yes`` needs the consent
        ``converge_destructive`` in ``allow``, here as on the worker: without it, :class:`TaskRefusedError` (54)."""
        if not isinstance(yes, bool):  # as api.converge's flags: "no" would be read as True, a destructive converge
            raise ConfigInvalidError(f"yes must be True or False, not {type(yes).__name__}")
        if yes and (refused := self.refusal(self.converge.name, (CONVERGE_DESTRUCTIVE,), queuing=True)) is not None:
            raise refused
        kwargs = {"yes": yes, "wait_until": time.time() + self.line.line_wait_seconds}
        return self.converge.apply_async(kwargs=kwargs, **self._routing())

    def _converge(self, task: Task, yes: bool = False, wait_until: float | None = None) -> dict[str, Any]:
        _flag(task, "yes", yes)  # bool("no") is True: a destructive converge nobody asked for
        if isinstance(wait_until, bool) or not isinstance(wait_until, (int, float, type(None))):
            raise TaskInvalidError(f"{task.name}: wait_until must be a Unix time, not a {type(wait_until).__name__}", task=task.name)
        deadline = wait_until if wait_until is not None else time.time() + self.line.line_wait_seconds  # queued by hand
        if yes and (refused := self.refusal(task.name, (CONVERGE_DESTRUCTIVE,))) is not None:
            log.warning("%s: refused a converge with yes=True (%s)", task.name, refused.kind)
            return _failure(refused, refused.message)
        try:
            report = _run(api.converge(self.settings(), confirm=bool(yes), lock=api.Lock(wait=self.line.lock_wait_seconds), observers=self.observers))
        except LockHeldError as exc:
            if time.time() < deadline:
                raise task.retry(kwargs={"yes": bool(yes), "wait_until": deadline}, countdown=self.line.poll_seconds, max_retries=None) from None
            return _failure(exc, f"converge was not run: the migration lock stayed held until the task gave up ({exc.message})")
        except MongoshiftError as exc:
            return _failure(exc, exc.message)
        return report.to_json()

    def _verify(self, task: Task, reopen: bool = False) -> list[dict[str, Any]]:
        _flag(task, "reopen", reopen)  # bool("false") is True: a pass that rewrites documents
        return [v.to_json() for v in _run(api.verify_background(self.settings(), reopen=bool(reopen), observers=self.observers))]

    def _audit(self, task: Task) -> dict[str, Any]:
        return _run(api.audit(self.settings())).to_json()

    def beat_schedule(
        self,
        *,
        background_every: float | None = 60.0,
        verify_every: float | None = 600.0,
        audit_every: float | None = 3600.0,
        reopen: bool = False,
    ) -> dict[str, dict[str, Any]]:
        """Entries for ``app.conf.beat_schedule``: the background tick, ``background verify`` and ``audit``
        every so many seconds (None leaves one out); ``reopen``: verify gives a drifted migration another pass."""
        if not isinstance(reopen, bool):  # the worker refuses a verify whose reopen is not true or false: every tick would fail
            raise ConfigInvalidError(f"beat_schedule(): reopen is True or False, not a {type(reopen).__name__}")
        entries: dict[str, dict[str, Any]] = {}
        # each refusal names the argument the caller wrote (the entry's key, "background-verify", is no argument)
        for key, option, task, every, kwargs in (
            ("background-tick", "background_every", self.background_tick, background_every, {}),
            ("background-verify", "verify_every", self.verify, verify_every, {"reopen": reopen}),
            ("audit", "audit_every", self.audit, audit_every, {}),
        ):
            if every is None:
                continue
            # NaN passes "every < 1" (every comparison with it is false), and infinity is no period either
            if isinstance(every, bool) or not isinstance(every, (int, float)) or not math.isfinite(every) or every < 1:
                raise ConfigInvalidError(f"beat_schedule(): {option} takes seconds (at least 1) or None, not {every!r}")
            entry: dict[str, Any] = {"task": task.name, "schedule": float(every), "kwargs": kwargs}
            if self.queue:
                entry["options"] = {"queue": self.queue}
            entries[f"{self.prefix}.{key}"] = entry
        return entries


def _failure(exc: MongoshiftError, message: str) -> dict[str, Any]:
    return {"success": False, "error": {"code": int(exc.exit_code), "kind": exc.kind, "message": api.redact(message)}}


def _flag(task: Task, name: str, value: object) -> None:
    """A task's true/false keyword as sent: another type is refused (exit 25), never read for its truth."""
    if not isinstance(value, bool):
        raise TaskInvalidError(f"{task.name}: {name} must be true or false, not a {type(value).__name__}", task=task.name)


def _file_name(name: str) -> str:
    return name if name.endswith(".py") else f"{name}.py"


def register(
    app: Celery,
    *,
    settings: SettingsSource = None,
    prefix: str = "mongoshift",
    queue: str | None = None,
    line: LineOptions | None = None,
    background: bg.BackgroundOptions | None = None,
    observers: Sequence[api.Observer] = (),
    allow: Iterable[str] = DEFAULT_ALLOW,
) -> MongoshiftTasks:
    """Register mongoshift's tasks on ``app`` and return the handle that queues them.

    ``settings``: a :class:`~mongoshift.api.Settings`, a function returning one, or the path of
    the project file; None: ``MONGOSHIFT_CONFIG``, else the worker's working directory, as the
    CLI looks. ``prefix`` names the tasks (``mongoshift.up``, ...); ``queue`` routes them.
    ``observers``: functions that receive the events of every run in the worker (docs/observability.md).
    ``allow``: the kinds of task its workers take (:data:`TASK_KINDS`: the line's :data:`LINE_KINDS` and
    ``converge_destructive``; default only ``up``, the line forward in order): a rollback, a redo, one file out
    of order or a converge with ``yes=True`` queued by any producer is refused (``task_refused``, exit 54) and
    never run unless the worker's own registration allows it."""
    if not isinstance(app, Celery):
        raise ConfigInvalidError(f"register() takes a Celery app, not {type(app).__name__}")
    if not isinstance(prefix, str) or not prefix or not all(part.isidentifier() for part in prefix.split(".")):
        raise ConfigInvalidError(f"prefix must be a dotted name such as 'mongoshift', not {prefix!r}")
    if queue is not None and (not isinstance(queue, str) or not queue.strip()):  # 5 failed at the first send, "" routed nothing
        raise ConfigInvalidError(f"queue must be a queue name (non-empty text) or None, not {queue!r}")
    if settings is not None and not isinstance(settings, (api.Settings, str, Path)) and not callable(settings):
        raise ConfigInvalidError(f"settings must be Settings, a function returning them, or a project file path, not {type(settings).__name__}")
    listed = list(observers) if isinstance(observers, (list, tuple)) else None
    if listed is None or any(not callable(o) or inspect.iscoroutinefunction(o) for o in listed):
        raise ConfigInvalidError("observers must be a list of plain functions (called, not awaited)")
    if isinstance(allow, str) or not isinstance(allow, (set, frozenset, list, tuple)) or any(not isinstance(k, str) for k in allow):
        raise ConfigInvalidError(f"allow must be a set of the kinds {', '.join(sorted(TASK_KINDS))}, not {type(allow).__name__}")
    unknown = sorted(set(allow) - TASK_KINDS)
    if unknown:
        raise ConfigInvalidError(f"allow takes {', '.join(sorted(TASK_KINDS))}, not {', '.join(map(repr, unknown))}")
    for option, value, kind in (("line", line, LineOptions), ("background", background, bg.BackgroundOptions)):
        if value is not None and not isinstance(value, kind):  # its values are checked when it is made
            raise ConfigInvalidError(f"{option} must be a {kind.__name__}(...), not {type(value).__name__}")
    return MongoshiftTasks(app, settings, prefix, queue, line or LineOptions(), background or bg.BackgroundOptions(), listed, frozenset(allow))
