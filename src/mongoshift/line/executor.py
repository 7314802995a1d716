"""Running a plan: hooks, per-file transactions, changelog records, stop points.

The executor starts no migration after a stop was asked (Ctrl-C, SIGTERM,
a cancel, a timeout, a lost lock); ``ctx.cancelled`` tells the running body at
once. A body that returns after that may have stopped early, so it is
recorded failed (a transactional one rolled back), never applied: the next
run runs it again. The lock is read again before each record, so a
migration that ran without it is recorded failed too.
With a per-file transaction the body and its changelog record commit
together; without one, a crash between the two re-runs the migration next
time, which is why bodies should be idempotent.
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from pymongo import MongoClient
from pymongo.errors import PyMongoError

from ..background.steps import BackgroundSteps, Waiting
from ..errors import (
    BackgroundFailedError,
    ConfigInvalidError,
    ConnectionFailedError,
    ExecutionFailedError,
    FileNotFoundMigrationError,
    HookFailedError,
    IrreversibleMigrationError,
    LockLostError,
    MigrationTimeoutError,
    MongoshiftError,
    RequirementsPendingError,
    RunAbortedError,
    TransactionsUnsupportedError,
)
from ..project.changelog import Changelog, RecordWrite
from ..project.events import end_fields
from ..project.loader import load_all
from ..project.migration_log import MigrationLog, correlated
from ..project.redaction import describe_error, describe_transform_error, redact
from ..project.run import BodyCancel
from ..project.server_errors import connection_cause, connection_lost, connection_words, transactions_unsupported
from ..project.session import Session
from ..project.uri_source import resolve_uri
from ..project.user_code import call, call_detached, detached_thread, guard_exit, is_async
from ..project.wording import plural
from ..schema.background import Background
from .context import Direction, MigrationContext
from .hooks import Hooks, load_hooks
from .plan import Plan, Step, background_run_hint

#: The unstarted steps a stopped run names (the rest are counted).
_NAMED_LEFT = 5

log = logging.getLogger("mongoshift")

Outcome = Literal["applied", "reverted", "skipped", "failed"]


@dataclass
class MigrationResult:
    name: str
    direction: Direction
    status: Outcome
    batch: int | None = None
    duration_ms: int = 0
    error: str | None = None
    reason: str | None = None
    #: What registration noticed (a background file): counts only, never ids or values.
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Runtime:
    """What migrations and hooks of one run share: its session, and the context each function receives."""

    def __init__(self, session: Session, logger: logging.Logger = log) -> None:
        self.session = session
        self.settings = session.settings
        self.client = session.client
        self.db_name = session.db_name
        self.run = session.run
        self.cancel = session.cancel
        self.events = session.events
        self.logger = logger

    def sync_client(self) -> MongoClient[Any]:
        return self.session.sync_client()

    def context(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        direction: Direction | None = None,
        session: Any = None,
        attempt: int = 1,
    ) -> MigrationContext:
        client: Any = self.client if is_async(fn) else self.sync_client()
        logger = correlated(
            self.logger.getChild(name.removesuffix(".py")) if name else self.logger, self.run.run_id, name, direction, attempt
        )
        return MigrationContext(
            db=client[self.db_name],
            client=client,
            run_id=self.run.run_id,
            logger=logger,
            # each body its own view, which remembers whether the body saw a stop (Executor._check_cancelled)
            cancelled=BodyCancel(self.cancel),
            name=name,
            direction=direction,
            session=session,
            attempt=attempt,
            log=MigrationLog(self.events, logger, name, direction, attempt),
        )


def _describe(exc: BaseException) -> str:
    """What a migration, hook or step raised, for the changelog, stderr and ``--json``. Python's own exception
    classes compose their messages from the value they failed on (``int(doc["email"])``: ``invalid literal for
    int() with base 10: 'ann@example.com'``): their quoted literals are masked as a background transform's are.
    Any other class (the author's own, a driver's, mongoshift's) keeps its message as it chose to word it."""
    if type(exc).__module__ == "builtins":
        return describe_transform_error(exc)
    return describe_error(exc)


def _traceback(exc: BaseException, path: Path) -> str:
    """The traceback from the migration file's first frame on (the runner's own frames
    before it say nothing to the author), through the same redaction as the error."""
    frames = traceback.extract_tb(exc.__traceback__)
    start = next((i for i, frame in enumerate(frames) if Path(frame.filename) == path), 0)
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames[start:])]
    return redact("".join(lines), limit=20_000) + _describe(exc)


#: Bodies of a plan noted on the lock (a run of more notes the first ones: the one it died in is among them
#: unless it had recorded that many).
MAX_NOTED = 1_000


class Executor:
    """Runs the steps of a plan on one session: hooks, bodies, records, and background files through :mod:`~mongoshift.background.steps`."""

    def __init__(self, session: Session, hooks: Hooks | None = None) -> None:
        self.session = session
        self.runtime = Runtime(session)
        self.changelog = session.changelog
        self.hooks = load_hooks(session.settings.hooks) if hooks is None else hooks
        self.lock = session.lock
        self.background = BackgroundSteps(session)
        self._lock_warned = False
        self.waiting: list[dict[str, Any]] = []
        #: The step whose time ran out: a sync body still running in its thread never records it.
        self._timed_out: str | None = None
        #: What was said of a step that ran to its end past a stop it never looked at: a warning of its result too.
        self._past_stop: dict[tuple[str, str], str] = {}
        #: Warnings of the run as a whole (a migration a dead run left unfinished), for its report.
        self.warnings: list[str] = []

    async def execute(self, plan: Plan, *, batch: int, batch_per_step: bool = False) -> list[MigrationResult]:
        """Run every step of ``plan`` in order; raise with the results so far on failure."""
        results = [MigrationResult(name, "up", "skipped", reason=why) for name, why in plan.skipped]
        await self._left_unfinished(plan)
        self._prepare(plan.steps)
        await self._refuse_one_way(plan.steps)
        await self._refuse_without_transactions(plan.steps)
        await self._fetch_sync_uri(plan.steps)
        await self._note_plan(plan.steps)
        if not plan.steps:
            return results
        success = False
        failure: MongoshiftError | None = None
        begun: set[str] = set()
        try:
            await self._hook("before_all", self._hook_ctx("before_all"))
            for index, step in enumerate(plan.steps):
                self._check_stop(results, plan.steps[index:])
                step_batch: int | None = batch + index if batch_per_step and step.direction == "up" else batch
                if step.direction == "down":
                    step_batch = step.record.batch if step.record else None
                info = {"direction": step.direction, "index": index, "total": len(plan.steps), "batch": step_batch}
                stop = await self._requirements(step)
                if stop:
                    self.waiting = stop
                    success = True
                    return results
                if step.file.squashed_into is not None and step.file.squashed_into not in begun:
                    begun.add(step.file.squashed_into)
                    await self._begin_squash(plan, step, step_batch)
                result = await self._run_step(step, step_batch, results, info)
                results.append(result)
                await self._hook("after_each", step.name, result.duration_ms, self._hook_ctx("after_each", step), info)
            self._note_lock_lost()  # lost during the last step: no next step's check says it
            self._check_stopped_at_the_end(results)
            success = True
            return results
        except MongoshiftError as exc:
            exc.details.setdefault("results", [r.to_json() for r in results])
            failure = exc
            raise
        finally:
            summary = {
                "success": success,
                "applied": [r.name for r in results if r.status in ("applied", "reverted")],
                "direction": plan.steps[0].direction,
            }
            try:
                await self._hook("after_all", self._hook_ctx("after_all"), summary)
            except HookFailedError as later:
                if success:
                    later.details.setdefault("results", [r.to_json() for r in results])
                    raise
                # The run's own failure decides the exit code: this one is said, and listed with it.
                log.error("%s (after the run had already failed)", later.message)
                log.debug("the after_all hook's traceback", exc_info=later)
                if failure is not None:
                    failure.details.setdefault("later_errors", []).append(later.to_json())
            if success:
                self._check_stopped_at_the_end(results)  # a Ctrl-C during after_all is still a stopped run (11)

    def _transactional_step(self, step: Step) -> bool:
        use_txn = step.file.use_transaction
        return bool(self.runtime.settings.use_transaction if use_txn is None else use_txn)

    async def _note_plan(self, steps: list[Step]) -> None:
        """Note on the lock, once, the bodies this run is about to run in order, for a run that may
        take the lock over should this one die (the changelog then tells which one it had reached)."""
        if self.lock is None:
            return
        bodies = [
            {"name": step.name, "direction": step.direction, "transaction": self._transactional_step(step)}
            for step in steps if step.file.background is None and not step.file.is_squash
        ]
        if bodies:
            await self.lock.note_working_on({"steps": bodies[:MAX_NOTED]})

    async def _left_unfinished(self, plan: Plan) -> None:
        """Say so when the run this one took the lock over from stopped before recording a body it had
        planned: the first such one may have been running, and without a transaction it may have done
        part of its work; it runs again from the start (in this run, when this run's plan has it)."""
        note = self.lock.left_unfinished if self.lock is not None else None
        steps = note.get("steps") if note is not None else None
        if not isinstance(steps, list) or not steps:
            return
        records = await self.changelog.records()
        for noted in steps:
            if not isinstance(noted, dict) or not isinstance(noted.get("name"), str):
                return
            name, direction = noted["name"], noted.get("direction")
            record = records.get(name)
            if direction == "up" and record is not None and record.status == "applied":
                continue
            if direction == "down" and (record is None or record.status != "applied"):
                continue
            break  # the first body of its plan whose outcome it never recorded
        else:
            return
        gone = "the run that held the lock stopped (it died, or left the lock unrenewed past its time-to-live)"
        if noted.get("transaction"):
            log.info("%s (%s) was next when %s; it runs in a transaction, so nothing of it was kept", name, direction, gone)
            return
        again = (
            "This run runs it again from the start"
            if any(step.name == name and step.direction == direction for step in plan.steps)
            else f"It runs again from the start with the next '{direction}'"
        )
        warning = (
            f"{name} ({direction}) was next in line when {gone}, and its outcome was never recorded: if that run had "
            f"started it, it may have done part of its work. {again}, so make it safe to run twice, or check what it did"
        )
        self.warnings.append(warning)  # printed with the run's report, or before its error

    async def _begin_squash(self, plan: Plan, step: Step, batch: int | None) -> None:
        """Before the first replaced file of a squash file runs, its record says the squash is under way,
        so that a run stopped in between is finished by the next one (an in-between database without
        that record is refused: see :func:`~mongoshift.line.plan.fold_squashes`)."""
        name = step.file.squashed_into
        squash = next(s for s in plan.steps if s.name == name)
        await self._confirm_lock(step)
        if step.direction == "up":
            await self.changelog.mark_failed(
                name=squash.name, batch=batch or 0, checksum=squash.file.checksum,
                error="squash under way: the files it replaced are being applied", run=self.runtime.run, description=squash.file.description,
            )
            return
        existing = await self.changelog.record(squash.name)
        if existing is None or existing.status != "applied":
            # applied when the first of its files was (not now: the rollback only names it)
            parts = [await self.changelog.record(part.name) for part in squash.file.parts]
            times = [r.applied_at for r in parts if r is not None and r.applied_at is not None]
            await self.changelog.write(
                Changelog.applied(
                    squash.name, batch=batch or 0, checksum=squash.file.checksum, duration_ms=0,
                    run=self.runtime.run, description=squash.file.description, kind="squash", at=min(times) if times else None,
                )
            )

    async def preview(self, plan: Plan) -> tuple[list[Step], list[dict[str, Any]]]:
        """What :meth:`execute` would run, refused exactly as it would refuse: nothing is written.

        ``dry-run`` calls this after the same planning as the real command, so
        the two cannot diverge: every file imported and checked, rollbacks
        without ``down`` refused, and ``requires`` judged in order (a
        background migration this run would register counts as registered,
        an ordinary one it would apply as applied).
        """
        self._prepare(plan.steps)
        await self._refuse_one_way(plan.steps)
        await self._refuse_without_transactions(plan.steps)
        planned: dict[str, str] = {}
        for index, step in enumerate(plan.steps):
            stop = await self._requirements(step, planned=planned)
            if stop:
                return plan.steps[:index], stop
            if step.direction == "up":
                planned[step.name] = "background" if step.file.background is not None else "migration"
        return plan.steps, []

    async def _requirements(self, step: Step, *, planned: dict[str, str] | None = None) -> list[dict[str, Any]] | None:
        """Check ``requires`` before ``step``: raise (policy ``error``), or return where the run stops (``stop``).

        Every requirement must be done before an ordinary file runs. A background file only needs
        its ordinary requirements applied: it registers blocked on background ones. A name that
        matches no migration is refused (exit 8), whatever the policy: waiting would never end.
        ``planned`` (a preview): the kind of each file this run handles earlier; nothing is
        read-modified, nothing reopened.
        """
        if step.direction != "up" or not step.file.requires:
            return None
        settings = self.runtime.settings
        background = step.file.background is not None
        waiting: list[Waiting] = []
        for name in step.file.requires:
            if planned is not None and name in planned:
                if planned[name] == "background" and not background and not settings.background_inline:
                    waiting.append(Waiting(name, "pending", "pending"))  # registered by this run, not run by it
                continue
            for gap in await self.background.unmet(name, reopen=planned is None and not background):
                if gap.kind == "unknown":
                    raise FileNotFoundMigrationError(
                        f"{step.name} requires {name}, but no migration has that name (no file in the migrations "
                        "folder, no changelog record, no background migration): fix the name in its requires",
                        file=step.name,
                        requires=name,
                    )
                if not (background and gap.kind == "background"):
                    waiting.append(gap)
        if not waiting:
            return None
        listed = ", ".join(w.describe() for w in waiting)
        if settings.on_requires_pending == "stop":
            if planned is None:
                log.warning("stopping before %s: it requires %s", step.name, listed)
            return [{"migration": step.name, "waits_for": [w.name for w in waiting]}]
        todo = []
        if any(w.kind == "migration" for w in waiting):
            todo.append("apply the ordinary ones first ('mongoshift up' applies in name order)")
        if any(w.kind == "background" for w in waiting):
            todo.append(f"run {background_run_hint(self.runtime.settings, [w.name for w in waiting if w.kind == 'background'])}")
        kinds = "background migrations" if all(w.kind == "background" for w in waiting) else "migrations"
        raise RequirementsPendingError(
            f"{step.name} requires {kinds} that are not done: {listed}; {' and '.join(todo)} and try again",
            file=step.name,
            waits_for=[w.name for w in waiting],
        )

    def _prepare(self, steps: list[Step]) -> None:
        """Import every file first: a broken file fails the run before anything is written (every broken one named)."""
        load_all(step.file for step in steps)
        for step in steps:
            if step.file.background is not None:  # the declarations are read (imported) only by a run that needs them
                self.background.align(step.file)
            if step.direction == "down" and step.file.irreversible:
                raise IrreversibleMigrationError(
                    f"{step.name} has no down(ctx): it cannot be rolled back", file=step.name
                )
        self._refuse_sync_without_uri(steps)

    def _plain_code(self, steps: list[Step]) -> list[str]:
        """The bodies and hooks of ``steps`` written as plain ``def``: they run on the sync driver, which needs the URI."""
        plain: list[str] = []
        for step in steps:
            if step.file.background is None and not step.file.is_squash:
                fn = step.file.up if step.direction == "up" else step.file.down
                if fn is not None and not is_async(fn):
                    plain.append(step.name)
        return plain + [f"the {name} hook" for name, fn in self.hooks.functions.items() if not is_async(fn)]

    def _refuse_sync_without_uri(self, steps: list[Step]) -> None:
        """A plain ``def`` body or hook runs on the sync driver, which needs the server's URI: on a session opened on
        the application's ``client=`` alone, refused before anything runs (it failed inside the body, recorded failed)."""
        settings = self.runtime.settings
        if settings.uri or settings.uri_command or settings.uri_factory:
            return
        if plain := self._plain_code(steps):
            raise ConfigInvalidError(
                f"plain def code runs on the sync driver, which needs the server's URI (uri, uri_command or uri_factory), "
                f"not only client=: {', '.join(plain)}; give the URI, or make them async def"
            )

    async def _fetch_sync_uri(self, steps: list[Step]) -> None:
        """On the application's ``client=`` the URI was never fetched (the client is the connection): plain ``def``
        code needs it for the sync driver, so ``uri_command`` / ``uri_factory`` runs now, before anything is written,
        and a failure to get it stops the run there (it failed inside the body, recorded failed)."""
        if self.runtime.settings.uri or not self._plain_code(steps):
            return
        resolved = await resolve_uri(self.runtime.settings)
        self.session.settings = self.runtime.settings = resolved

    async def _refuse_one_way(self, steps: list[Step]) -> None:
        """A rollback that reaches a one-way background migration which already rewrote documents is
        refused before its first step runs, as a file without ``down`` is (it stopped halfway: the
        steps before it done, their reverts registered)."""
        leaving = {step.name for step in steps if step.direction == "down"}
        for step in steps:
            if step.direction == "down" and step.file.background is not None:
                await self.background.refuse_one_way(step.name, step.file.background, leaving)

    async def _refuse_without_transactions(self, steps: list[Step]) -> None:
        """A file that runs in a transaction (its ``use_transaction``, or the setting) on a server without them
        (a standalone server) is refused before the first step runs, naming every such file of the plan: met
        only when the run reached it, the files before it were applied and the run stopped half way (exit 15)."""
        wanting = [step for step in steps if step.file.background is None and not step.file.is_squash and self._transactional_step(step)]
        if not wanting or await self.session.transactions_supported():
            return
        names = list(dict.fromkeys(step.name for step in wanting))  # redo runs one file down, then up
        by_setting = [step.name for step in wanting if step.file.use_transaction is None]
        way_out = "set use_transaction = False in " + ("it" if len(names) == 1 else "them")
        if by_setting:
            way_out += " or turn the use_transaction setting off (use_transaction = false in the project file, or MONGOSHIFT_USE_TRANSACTION=false)"
        raise TransactionsUnsupportedError(
            f"this server does not support transactions (a standalone server), and {plural(len(names), 'migration')} of this run "
            f"{'asks' if len(names) == 1 else 'ask'} for one: {', '.join(names)}; nothing was run: use a replica set, or {way_out}",
            files=names,
        )

    def _note_lock_lost(self) -> None:
        """``on_lock_lost = "warn"``: the lost lock said once, in the log and in the run's warnings (``--json``)."""
        if self.lock is not None and self.lock.lost.is_set() and not self.session.lock_lost() and not self._lock_warned:
            self._lock_warned = True
            warning = f"the migration lock was lost ({self.lock.lost_reason}); the run went on because on_lock_lost = warn"
            log.warning("%s", warning)
            self.warnings.append(warning)

    def _check_stop(self, results: list[MigrationResult], left: Sequence[Step] = ()) -> None:
        """Raise when a stop was asked; the message names the steps ``left`` unstarted (a ``redo`` stopped
        after its rollback leaves its file rolled back: the reader learns which ``up`` to run)."""
        self._note_lock_lost()
        named = ", ".join(f"{step.name} ({step.direction})" for step in left[:_NAMED_LEFT])
        more = f" and {len(left) - _NAMED_LEFT} more" if len(left) > _NAMED_LEFT else ""
        self.session.check_stop(
            lambda reason: f"run stopped ({reason}); {plural(len(results), 'migration')} completed, the rest were not started"
            + (f": {named}{more}" if left else "")
        )

    def _check_stopped_at_the_end(self, results: list[MigrationResult]) -> None:
        """A stop asked while the last step ran (one that never looked ran to its end and was
        recorded) still ends the run as stopped (exit 11): a deploy script must see the Ctrl-C."""
        if self.runtime.cancel.is_set():
            done = sum(r.status in ("applied", "reverted") for r in results)
            stopped = RunAbortedError(
                f"run stopped ({self.runtime.cancel.reason or 'cancelled'}) during its last migration or hook, which ran to its end; "
                f"{plural(done, 'migration')} completed, none was left to start",
                reason="cancelled",
            )
            stopped.details["results"] = [r.to_json() for r in results]
            raise stopped

    def _lock_lost(self, step: Step) -> LockLostError | None:
        """The error of a step that ran while the lock was lost (policy ``abort``), else None."""
        if self.lock is None or not self.session.lock_lost():
            return None
        return LockLostError(
            f"{step.name}: the migration lock was lost while it ran ({self.lock.lost_reason}); "
            "it is not recorded as done",
            file=step.name,
        )

    async def _confirm_lock(self, step: Step) -> None:
        """Checked on the server right before a record is written: a run without its lock records nothing done."""
        if self.lock is None or self.session.settings.on_lock_lost != "abort":
            return
        await self.lock.confirm()
        error = self._lock_lost(step)
        if error is not None:
            raise error

    def _check_cancelled(self, step: Step, ctx: MigrationContext) -> None:
        """Right before a record, when a stop was asked while the body ran. A body that saw it
        (``ctx.cancelled``) may have returned early, and one whose time ran out was given up:
        neither is recorded done. One that never looked ran to its end and is recorded as usual."""
        if not self.runtime.cancel.is_set():
            return
        done = "applied" if step.direction == "up" else "reverted"
        seen = isinstance(ctx.cancelled, BodyCancel) and ctx.cancelled.seen
        if not seen and self._timed_out != step.name:
            said = f"{step.name} ran to its end after the stop was asked (it did not look at ctx.cancelled): recorded {done}"
            self._past_stop[(step.name, step.direction)] = said
            log.warning("%s", said, extra={"run_id": self.runtime.run.run_id, "migration": step.name, "direction": step.direction})
            return
        raise RunAbortedError(
            f"{step.name}: the run was asked to stop while it ran ({self.runtime.cancel.reason or 'cancelled'}) "
            f"and it {'saw that and returned' if seen else 'ran past its time'}; "
            f"it is not recorded as {done} and runs again with the next '{step.direction}'",
            file=step.name,
            reason="cancelled",
        )

    def _hook_ctx(self, hook: str, step: Step | None = None) -> MigrationContext | None:
        """The context a hook gets; a per-migration hook's names its migration and direction, so what it
        logs (``ctx.log``, ``ctx.logger``) is that migration's, as its span and events are."""
        fn = self.hooks.get(hook)
        if fn is None:
            return None
        return self.runtime.context(fn, name=step.name, direction=step.direction) if step else self.runtime.context(fn)

    async def _hook(self, hook: str, *args: Any) -> None:
        fn = self.hooks.get(hook)
        if fn is None:
            return
        try:
            await call(fn, *args)
        except Exception as exc:
            raise HookFailedError(f"hook {hook} failed: {_describe(exc)}", hook=hook) from exc

    async def _run_step(self, step: Step, batch: int | None, results: list[MigrationResult], info: dict[str, Any]) -> MigrationResult:
        """One step, its ``before_each`` hook included, between ``migration_start`` and ``migration_end``,
        inside the observers' scopes: a failed hook is that migration's failure (``hook_failed``)."""
        events = self.runtime.events
        fields = {"direction": step.direction, "batch": batch, "kind": step.file.kind}
        start = events.emit("migration_start", step.name, **fields)
        started = time.monotonic()
        try:
            with events.migration_scope(start):
                await self._hook("before_each", step.name, self._hook_ctx("before_each", step), info)
                self._check_stop(results, [step])  # a stop asked during the hook: the body never starts
                result = await self._run_body(step, batch, results)
        except BaseException as exc:
            events.emit("migration_end", step.name, **fields, **end_fields(started, exc))
            raise
        events.emit("migration_end", step.name, **fields, **end_fields(started, None, outcome=result.status))
        return result

    async def _run_body(self, step: Step, batch: int | None, results: list[MigrationResult]) -> MigrationResult:
        if step.file.background is not None:
            return await self._background(step, batch, results)
        if step.file.is_squash:
            return await self._squash(step, batch)
        fn = step.file.up if step.direction == "up" else step.file.down
        assert fn is not None
        use_txn = step.file.use_transaction
        if use_txn is None:
            use_txn = self.runtime.settings.use_transaction
        started = time.monotonic()
        log.info(
            "%s %s",
            "applying" if step.direction == "up" else "reverting",
            step.name,
            extra={"run_id": self.runtime.run.run_id, "migration": step.name, "direction": step.direction},
        )
        try:
            body = self._transactional(step, fn, batch, started) if use_txn else self._plain(step, fn, batch, started)
            timeout = step.file.timeout(self.runtime.settings.migration_timeout_seconds)
            if timeout is None:
                await body
            else:
                try:
                    await asyncio.wait_for(body, timeout)
                except TimeoutError:
                    self._timed_out = step.name
                    self.runtime.cancel.set(f"{step.name} timed out")
                    raise MigrationTimeoutError(f"{step.name} ran longer than {timeout:g}s") from None
        except (TransactionsUnsupportedError, MigrationTimeoutError, ExecutionFailedError, LockLostError, RunAbortedError, ConnectionFailedError) as exc:
            await self._failed(step, batch, exc, results, started)
            raise
        except asyncio.CancelledError:
            # The task awaiting the call was cancelled (asyncio.wait_for, a TaskGroup, an application shutting down):
            # the body was cut off where it stood. Recorded failed before the lock is released, as a stop that the
            # body saw is: without a record it read "pending", and the next run, finding the lock released, said
            # nothing of the work the body may have left half done.
            stopped = RunAbortedError(
                f"{step.name}: the task running it was cancelled while it ran; it is recorded failed and runs again "
                f"with the next '{step.direction}'",
                file=step.name,
                reason="cancelled",
            )
            try:
                await self._failed(step, batch, stopped, results, started)
            except asyncio.CancelledError:  # cancelled once more while it was recorded: the cancellation goes on
                pass
            raise
        except Exception as exc:
            lost = self._lock_lost(step)  # a body that stopped on ctx.cancelled after the lock was lost
            if lost is not None:
                await self._failed(step, batch, lost, results, started)
                raise lost from exc
            if self.runtime.cancel.is_set() and self._timed_out != step.name:  # it raised after Ctrl-C / SIGTERM
                stopped = RunAbortedError(
                    f"{step.name}: the run was asked to stop while it ran ({self.runtime.cancel.reason or 'cancelled'}) "
                    f"and it raised {_describe(exc)}; it is recorded failed and runs again with the next '{step.direction}'",
                    file=step.name,
                    reason="cancelled",
                )
                await self._failed(step, batch, stopped, results, started)
                raise stopped from exc
            if connection_lost(exc):  # the server went away: exit 5, as for any lost connection, not a bug of the body
                gone = ConnectionFailedError(
                    f"{step.name}: the connection to the server was lost while it ran ({connection_words(exc)}); "
                    f"it stopped there and runs again with the next '{step.direction}'",
                    file=step.name,
                    cause=connection_cause(exc),
                )
                await self._failed(step, batch, gone, results, started)
                raise gone from exc
            error = ExecutionFailedError(f"{step.name} failed: {_describe(exc)}", file=step.name)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s failed:\n%s", step.name, _traceback(exc, step.file.path))
                error.traceback_logged = True
            await self._failed(step, batch, exc, results, started, raised=error)
            raise error from exc
        duration = int((time.monotonic() - started) * 1000)
        status: Outcome = "applied" if step.direction == "up" else "reverted"
        said = self._past_stop.pop((step.name, step.direction), None)  # --json: the result says it, not only stderr
        return MigrationResult(step.name, step.direction, status, batch, duration, warnings=[said] if said else [])

    async def _background(self, step: Step, batch: int | None, results: list[MigrationResult]) -> MigrationResult:
        """A background file: up registers it (no document is touched), down registers its revert."""
        spec = step.file.background
        assert spec is not None
        started = time.monotonic()
        outcome: str | None = None
        warnings: list[str] = []
        try:
            if step.direction == "up":
                warnings = await self.background.register(step.name, spec, checksum=step.file.checksum, requires=step.file.requires)
                note = f"registered: run it with {background_run_hint(self.runtime.settings, [step.name])}"
            else:
                outcome = await self.background.revert(step.name, spec, checksum=step.file.checksum)
                note = "revert registered" if outcome == "revert" else "withdrawn (nothing was rewritten)"
            if self.runtime.settings.background_inline and (step.direction == "up" or outcome == "revert"):
                note = await self._run_inline(step.name, spec, step.file.checksum)
            await self._confirm_lock(step)
            await self.changelog.write(self._record(step, batch, started, kind="background"))
        except MongoshiftError as exc:
            await self._failed(step, batch, exc, results, started)
            raise
        except PyMongoError as exc:
            error = ExecutionFailedError(f"{step.name}: registration failed: {_describe(exc)}", file=step.name)
            await self._failed(step, batch, exc, results, started, raised=error)
            raise error from exc
        duration = int((time.monotonic() - started) * 1000)
        status: Outcome = "applied" if step.direction == "up" else "reverted"
        log.info("%s: %s", step.name, note)
        return MigrationResult(step.name, step.direction, status, batch, duration, reason=note, warnings=warnings)

    async def _squash(self, step: Step, batch: int | None) -> MigrationResult:
        """A squash file's own step, after the files it replaced ran (up) or were rolled back (down): its record."""
        started = time.monotonic()
        await self._confirm_lock(step)
        await self.changelog.write(self._record(step, batch, started, kind="squash"))
        if step.direction == "down":
            for earlier in step.file.absorbs:  # an earlier squash file that ran here is rolled back with its files
                await self.changelog.write(Changelog.reverted(earlier, duration_ms=0, run=self.runtime.run))
        status: Outcome = "applied" if step.direction == "up" else "reverted"
        parts = len(step.file.parts)
        return MigrationResult(step.name, step.direction, status, batch, int((time.monotonic() - started) * 1000), reason=f"squash of {plural(parts, 'file')}")

    async def _run_inline(self, name: str, spec: Background, checksum: str) -> str:
        """``background_inline``: run it to the end right here, under the migration lock (small data, tests)."""
        state = await self.background.run_inline(name, spec, checksum=checksum)
        status = state.status if state else "missing"
        if status != "completed" and self.lock is not None and self.session.lock_lost():
            raise LockLostError(f"the migration lock was lost while {name} ran inline ({self.lock.lost_reason})", file=name)
        if status == "completed":
            return "registered and run inline: completed"
        if status == "failed":
            raise BackgroundFailedError(f"{name} failed while running inline: {state.last_error if state else ''}", file=name)
        if self.runtime.cancel.is_set():
            raise RunAbortedError(f"stopped while {name} ran inline; 'mongoshift background run {name}' continues it")
        raise BackgroundFailedError(f"{name} ran inline but ended {status}", file=name)

    def _record(self, step: Step, batch: int | None, started: float, kind: str = "migration") -> RecordWrite:
        duration = int((time.monotonic() - started) * 1000)
        if step.direction == "up":
            return Changelog.applied(
                step.name,
                batch=batch or 0,
                checksum=step.file.checksum,
                duration_ms=duration,
                run=self.runtime.run,
                description=step.file.description,
                kind=kind,
            )
        return Changelog.reverted(step.name, duration_ms=duration, run=self.runtime.run)

    async def _plain(self, step: Step, fn: Callable[..., Any], batch: int | None, started: float) -> None:
        ctx = self.runtime.context(fn, name=step.name, direction=step.direction)
        await call_detached(fn, ctx)  # a sync body past its timeout_seconds never holds the command (detached_thread)
        await self._confirm_lock(step)
        self._check_cancelled(step, ctx)
        try:
            await self.changelog.write(self._record(step, batch, started))
        except PyMongoError as exc:
            lost = connection_lost(exc)
            raise (ConnectionFailedError if lost else ExecutionFailedError)(
                f"{step.name} ran, but its changelog record could not be written "
                f"({connection_words(exc) if lost else _describe(exc)}); the next '{step.direction}' runs it again",
                file=step.name,
                phase="changelog-write",
                body_succeeded=True,
            ) from exc

    async def _transactional(self, step: Step, fn: Callable[..., Any], batch: int | None, started: float) -> None:
        try:
            if is_async(fn):
                await self._async_transaction(step, fn, batch, started)
            else:
                # a sync body past its timeout_seconds never holds the command (detached_thread)
                await detached_thread(self._sync_transaction, step, fn, batch, started, asyncio.get_running_loop())
        except PyMongoError as exc:
            if transactions_unsupported(exc):
                raise TransactionsUnsupportedError(
                    f"{step.name} asks for a transaction, but this server does not support them "
                    "(a standalone server); use a replica set or set use_transaction = False",
                    file=step.name,
                ) from None
            raise

    async def _async_transaction(self, step: Step, fn: Callable[..., Any], batch: int | None, started: float) -> None:
        attempt = 0
        async with self.runtime.client.start_session() as session:

            async def body(s: Any) -> None:
                nonlocal attempt
                attempt += 1
                self._retrying(step, attempt)
                ctx = self.runtime.context(fn, name=step.name, direction=step.direction, session=s, attempt=attempt)
                await guard_exit(fn)(ctx)
                await self._confirm_lock(step)
                self._check_cancelled(step, ctx)
                try:
                    await self.changelog.write(self._record(step, batch, started), session=s)
                except PyMongoError as exc:
                    self._raise_if_record_refused(step, exc)
                    raise

            await session.with_transaction(body)

    def _sync_transaction(
        self, step: Step, fn: Callable[..., Any], batch: int | None, started: float, loop: asyncio.AbstractEventLoop
    ) -> None:
        client = self.runtime.sync_client()
        attempt = 0
        with client.start_session() as session:

            def body(s: Any) -> None:
                nonlocal attempt
                attempt += 1
                self._retrying(step, attempt)
                ctx = self.runtime.context(fn, name=step.name, direction=step.direction, session=s, attempt=attempt)
                guard_exit(fn)(ctx)
                asyncio.run_coroutine_threadsafe(self._confirm_lock(step), loop).result()
                self._check_cancelled(step, ctx)
                try:
                    self.changelog.write_sync(client, self._record(step, batch, started), session=s)
                except PyMongoError as exc:
                    self._raise_if_record_refused(step, exc)
                    raise

            session.with_transaction(body)

    @staticmethod
    def _raise_if_record_refused(step: Step, exc: PyMongoError) -> None:
        """The changelog record refused inside the transaction: the body's own error would blame the migration.
        A transient error or a lost connection stays as it is, for the driver's retry and for exit 5."""
        if exc.has_error_label("TransientTransactionError") or connection_lost(exc):
            return
        raise ExecutionFailedError(
            f"{step.name} ran, but its changelog record could not be written ({_describe(exc)}); "
            f"the transaction rolled its changes back, and the next '{step.direction}' runs it again",
            file=step.name,
            phase="changelog-write",
        ) from exc

    def _retrying(self, step: Step, attempt: int) -> None:
        """The driver runs a transaction's body again (a transient error): a ``migration_retry`` event."""
        if attempt > 1:
            self.runtime.events.emit("migration_retry", step.name, direction=step.direction, attempt=attempt)
        if attempt == 2:  # once: the driver may retry for two minutes, which said nothing without -v
            log.info(
                "%s: its transaction runs again after a transient error (a write conflict: a transaction a killed run "
                "left open holds its documents until the server aborts it, 60 s by default); the driver retries for up to 120 s",
                step.name,
            )

    async def _failed(
        self,
        step: Step,
        batch: int | None,
        exc: BaseException,
        results: list[MigrationResult],
        started: float,
        raised: MongoshiftError | None = None,
    ) -> None:
        """Record ``step`` failed and call ``on_error``; ``raised`` (``exc`` when it is one) is the error the
        run ends with: an ``on_error`` hook that fails too is listed in its ``later_errors``."""
        duration = int((time.monotonic() - started) * 1000)
        message = exc.message if isinstance(exc, MongoshiftError) else _describe(exc)
        reason = "cancelled" if isinstance(exc, RunAbortedError) else None
        results.append(MigrationResult(step.name, step.direction, "failed", batch, duration, error=message, reason=reason))
        if step.direction == "up":
            try:
                await self.changelog.mark_failed(
                    name=step.name,
                    batch=batch or 0,
                    checksum=step.file.checksum,
                    error=message,
                    run=self.runtime.run,
                    description=step.file.description,
                )
            except PyMongoError as unrecorded:  # said in one line (the traceback with -v): the run's own error follows
                why = connection_words(unrecorded) if connection_lost(unrecorded) else _describe(unrecorded)
                log.error("could not record the failure of %s (%s): the changelog does not show it failed", step.name, why)
                log.debug("the failed record's traceback", exc_info=unrecorded)
        fn = self.hooks.get("on_error")
        if fn is not None:
            try:
                await call(fn, step.name, exc, self.runtime.context(fn))
            except Exception as failed:
                log.error("the on_error hook failed: %s", _describe(failed))
                log.debug("the on_error hook's traceback", exc_info=failed)
                raised = raised or (exc if isinstance(exc, MongoshiftError) else None)
                if raised is not None:
                    later = HookFailedError(f"hook on_error failed: {_describe(failed)}", hook="on_error")
                    raised.details.setdefault("later_errors", []).append(later.to_json())
