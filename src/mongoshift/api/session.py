"""The session API: ``async with mongoshift.connect(settings) as ms:`` opens the project once for many calls.

Opening fetches the URI (``uri_command`` / ``uri_factory``), connects (or takes the
application's ``client``, left open) and checks mongoshift's own collections, once; the
migrations folder is read by the first call that needs it, once; every call of the session
reuses them. The migration lock is not part
of a session: each writing call takes it (as its :class:`~mongoshift.api.options.Lock`
says) and releases it before it returns, so a session left open blocks no other run.

The calls come in four groups: the migration line on the session itself (``up``,
``down``, ``redo``, ``plan``, ``status``, ``migrations``, ``audit``, ``lock_status``,
``unlock``, ``run_log``, ``squash``, ``lint``, and the adoption of a database: ``import_history``, ``baseline``), declared
collections on ``ms.collections``, background migrations on ``ms.background`` (the
in-application runner too: ``start_runner``), a job system's intents on ``ms.intents``. The
flat functions of :mod:`mongoshift.api` are the same calls on a one-shot project. See docs/api.md.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pymongo import AsyncMongoClient

from ..errors import ConfigInvalidError
from ..project.events import Observer
from ..project.run import CancelSignal
from ..project.session import Project
from ..project.settings import Settings
from .options import DEFAULT_LOCK, Confirmation, Lock, checked_cancel, checked_client, checked_observers, checked_settings

if TYPE_CHECKING:
    from pathlib import Path

    from ..background.inspect.drift import Verified
    from ..background.inspect.preview import Preview
    from ..background.inspect.status import BackgroundReport, PartitionRow
    from ..background.state.controls import Action, ControlResult, RepinResult, ThrottleResult
    from ..background.state.model import WatchRecord
    from ..background.watch.watcher import WatchOptions
    from ..converge.report import ConvergeReport
    from ..line.plan import StatusRow
    from ..models.generate import GenerateReport
    from ..project.lock import LockHolder
    from ..project.run_log import RunLogLine
    from ..schema.collections import CollectionDeclaration
    from .adoption import AdoptionReport
    from .background import BackgroundRunner, CoordinatorStep, ErrorCallback, SliceReport
    from .health import AuditReport
    from .hygiene import LintReport, SquashReport
    from .intents import Claim, Intent, IntentState
    from .migrations import DryRunReport, RunReport
    from .models import FromModelsReport

# Start-up time (bench/cli.py): each call imports its module when it runs, so a session that
# only reads the status loads neither converge nor the background engine.


@asynccontextmanager
async def connect(
    settings: Settings,
    client: AsyncMongoClient[Any] | None = None,
    observers: Iterable[Observer] = (),
    cancel: CancelSignal | None = None,
) -> AsyncIterator[Mongoshift]:
    """Open the project once and yield its :class:`Mongoshift` session; the connection closes on exit.

    ``client``: the application's open ``AsyncMongoClient`` (used and left open).
    ``observers``: plain functions that receive every event of every writing call.
    ``cancel``: one signal for every call (Ctrl-C, a timeout); without it each call has its own.
    A wrong option, URI or own collection fails here, before any call. Leaving it stops the
    background runners the session started, then closes; a call after that is refused.
    """
    project = Project(checked_settings(settings), checked_client(client), checked_observers(observers), checked_cancel(cancel), one_shot=False)
    try:
        await project.open()
        ms = Mongoshift(project)
        try:
            yield ms
        finally:
            await ms.background._stop_runners()  # before the connection they run on closes
    finally:
        await project.end()


def per_call(
    settings: Settings,
    client: AsyncMongoClient[Any] | None = None,
    observers: Iterable[Observer] = (),
    cancel: CancelSignal | None = None,
) -> Mongoshift:
    """A session whose connection belongs to each call: opened inside the call's run, closed at its end.

    The files and the URI are still read once. For a CLI command (each call on its own event
    loop, its connect and close within its run's telemetry), one call at a time: a call's end
    closes the connection. An application uses :func:`connect`.
    """
    return Mongoshift(Project(checked_settings(settings), checked_client(client), checked_observers(observers), checked_cancel(cancel)))


class Mongoshift:
    """An open project: the migration line's calls, ``collections``, ``background`` and ``intents``."""

    def __init__(self, project: Project) -> None:
        self._project = project
        #: Declared collections: ``converge`` and ``plan``.
        self.collections = Collections(project)
        #: Background migrations: run, inspect, control, the in-application runner.
        self.background = Background(project)
        #: A job system's queued and running intents: ``claim``, ``read``, ``settle``.
        self.intents = Intents(project)

    @property
    def settings(self) -> Settings:
        """The project's settings, with the URI as it was fetched."""
        return self._project.settings

    async def up(
        self,
        target: str | None = None,
        *,
        to: str | None = None,
        step: bool = False,
        force: bool = False,
        strict: bool | None = None,
        lock: Lock = DEFAULT_LOCK,
        converge: bool | None = None,
        confirm: Confirmation = False,
        batch: int | None = None,
        ordered: bool = False,
        checksums: Mapping[str, str] | None = None,
    ) -> RunReport:
        """Apply pending migrations (or ``target``, one file) in name order; a bulk run may end with a
        converge (``converge``, default the ``converge_after_up`` setting) whose destructive steps
        need ``confirm``. See :func:`mongoshift.api.migrations.up_in`."""
        from .migrations import up_in

        return await up_in(
            self._project, target=target, to=to, step=step, force=force, strict=strict, lock=lock,
            converge=converge, confirm=confirm, batch=batch, ordered=ordered, checksums=checksums,
        )

    async def create_from_models(self, name: str, models: str | None = None) -> FromModelsReport:
        """A background migration for each collection whose model changed shape since the snapshot (docs/models.md)."""
        from .models import create_from_models_in

        return await create_from_models_in(self._project, name, models)

    async def down(
        self,
        target: str | None = None,
        *,
        batch: int | None = None,
        steps: int | None = None,
        to: str | None = None,
        lock: Lock = DEFAULT_LOCK,
        ordered: bool = False,
        checksums: Mapping[str, str] | None = None,
        strict: bool | None = None,
    ) -> RunReport:
        """Roll back the last batch, or what ``target`` / ``batch`` / ``steps`` / ``to`` selects; ``strict`` (default:
        the setting) refuses while an applied file changed on disk, as ``up`` does."""
        from .migrations import down_in

        return await down_in(
            self._project, target=target, batch=batch, steps=steps, to=to, lock=lock, ordered=ordered, checksums=checksums, strict=strict
        )

    async def redo(
        self, target: str | None = None, *, lock: Lock = DEFAULT_LOCK, checksums: Mapping[str, str] | None = None, strict: bool | None = None
    ) -> RunReport:
        """Roll back and re-apply one migration (default: the newest applied) under one lock; ``strict`` as for :meth:`down`."""
        from .migrations import redo_in

        return await redo_in(self._project, target=target, lock=lock, checksums=checksums, strict=strict)

    async def plan(
        self,
        direction: Literal["up", "down"] = "up",
        target: str | None = None,
        *,
        to: str | None = None,
        force: bool = False,
        strict: bool | None = None,
        batch: int | None = None,
        steps: int | None = None,
        step: bool = False,
        ordered: bool = False,
    ) -> DryRunReport:
        """What ``up`` (or ``down``) with the same selection would run, refused as it would be; writes nothing."""
        from .migrations import dry_run_in

        return await dry_run_in(
            self._project, direction, target=target, to=to, force=force, strict=strict, batch=batch, steps=steps, step=step, ordered=ordered
        )

    def rescan(self) -> None:
        """Read the migrations folder again at the next call. A session reads it once, when it first
        needs it; a long-lived one (a service, the dashboard) calls this to see files deployed since."""
        self._project.rescan()

    async def status(self, *, checksums: bool = True) -> list[StatusRow]:
        """Every migration file with its state (a background one also with its own status)."""
        from .migrations import status_in

        return await status_in(self._project, checksums=checksums)

    async def migrations(self, only: Literal["pending", "applied"] | None = None) -> list[StatusRow]:
        """The status rows, optionally only the pending or the applied ones (``mongoshift list``)."""
        from .migrations import only_rows, status_in

        return only_rows(await status_in(self._project), only)

    async def audit(self, *, stale_after: float | None = None, now: datetime | None = None) -> AuditReport:
        """Judge the project's health without writing anything; ``report.exit_code`` is the CLI's verdict."""
        from .health import audit_in

        return await audit_in(self._project, stale_after=stale_after, now=now)

    async def lock_status(self) -> LockHolder | None:
        """Who holds the migration lock (None: nobody)."""
        from .migrations import lock_status_in

        return await lock_status_in(self._project)

    async def unlock(self) -> LockHolder | None:
        """Clear the migration lock whoever holds it; who held it (None: nothing to clear)."""
        from .migrations import unlock_in

        return await unlock_in(self._project)

    async def run_log(self, run_id: str) -> list[RunLogLine]:
        """The ``ctx.log`` lines a run of the line stored, in order, with their level (empty: none stored)."""
        from .migrations import run_log_in

        return await run_log_in(self._project, run_id)

    async def import_history(
        self,
        tool: str,
        *,
        collection: str | None = None,
        map_file: Path | str | None = None,
        dry_run: bool = False,
        force: bool = False,
        lock: Lock = DEFAULT_LOCK,
    ) -> AdoptionReport:
        """Record what another tool (``migrate-mongo``, ``beanie``, ...) applied as applied here, forward-only;
        its collection is only read. See :func:`mongoshift.api.adoption.import_history_in`."""
        from .adoption import import_history_in

        return await import_history_in(
            self._project, tool, collection=collection, map_file=map_file, dry_run=dry_run, force=force, lock=lock
        )

    async def baseline(self, to: str, *, dry_run: bool = False, lock: Lock = DEFAULT_LOCK) -> AdoptionReport:
        """Record every pending file up to ``to`` (inclusive) applied without running it; calling it is the confirmation."""
        from .adoption import baseline_in

        return await baseline_in(self._project, to, dry_run=dry_run, lock=lock)

    async def squash(self, to: str, *, dry_run: bool = False) -> SquashReport:
        """Replace the applied files up to ``to`` with one squash file (docs/squash.md); writes files, not the database."""
        from .hygiene import squash_in

        return await squash_in(self._project, to, dry_run=dry_run)

    async def lint(self, files: list[str] | None = None, *, sizes: bool = False) -> LintReport:
        """Risky operations in the line's files, read as source (docs/lint.md); ``sizes`` counts the collections named."""
        from .hygiene import lint_in

        return await lint_in(self._project, files, sizes=sizes)


class Collections:
    """The declared collections of an open project."""

    def __init__(self, project: Project) -> None:
        self._project = project

    async def converge(
        self,
        *,
        prune: bool = False,
        confirm: Confirmation = False,
        lock: Lock = DEFAULT_LOCK,
        requested_by: str | None = None,
        reason: str | None = None,
    ) -> ConvergeReport:
        """Make the server match the declarations under the migration lock; destructive steps need ``confirm``."""
        from .collections import converge_in

        return await converge_in(self._project, prune=prune, confirm=confirm, lock=lock, requested_by=requested_by, reason=reason)

    def declaration(self, name: str) -> CollectionDeclaration | None:
        """One declared collection, read from the project's files now, or None when ``name`` is not declared."""
        from ..project.declarations import declarations_by_name

        self._project.check_open()
        if not isinstance(name, str):
            raise ConfigInvalidError(f"a collection name is text, not {type(name).__name__}")
        return declarations_by_name(self._project.settings).get(name)

    async def plan(
        self, *, prune: bool = False, check: bool = False, declarations: Sequence[CollectionDeclaration] | None = None
    ) -> ConvergeReport:
        """What ``converge`` would do, without the lock and without writing anything."""
        from .collections import plan_converge_in

        return await plan_converge_in(self._project, prune=prune, check=check, declarations=declarations)

    async def generate(self, models: str | None = None, *, check: bool = False) -> GenerateReport:
        """Write the declaration files the models give, keeping hand edits; ``check``: compare only (docs/models.md)."""
        from .models import generate_collections_in

        return await generate_collections_in(self._project, models, check=check)


class Background:
    """The background migrations of an open project (registered by ``up``)."""

    def __init__(self, project: Project) -> None:
        self._project = project
        self._runners: list[BackgroundRunner] = []

    async def run(self, names: list[str] | None = None, *, concurrency: int = 1, once: bool = False) -> list[BackgroundReport]:
        """Run the named migrations (None: every runnable one) in this process until each ends (``once``: one round)."""
        from .background import run_in

        return await run_in(self._project, names, concurrency=concurrency, once=once)

    async def status(self, name: str | None = None) -> list[BackgroundReport]:
        """The report of one registered migration (None: of every one)."""
        from .background import status_in

        return await status_in(self._project, name)

    async def partitions(self, name: str) -> list[PartitionRow]:
        """The partitions of one registered migration."""
        from .background import partitions_in

        return await partitions_in(self._project, name)

    async def control(self, name: str, action: Action, *, reason: str | None = None, from_start: bool = False) -> ControlResult:
        """Pause, resume, cancel or retry a registered migration."""
        from .background import control_in

        return await control_in(self._project, name, action, reason=reason, from_start=from_start)

    async def throttle(
        self, name: str, *, batch_size: int | None = None, pause_ms: int | None = None, clear: bool = False, reason: str | None = None
    ) -> ThrottleResult:
        """Set the operator's pace of a registered migration (``clear``: back to the file's); recorded like a control."""
        from .background import throttle_in

        return await throttle_in(self._project, name, batch_size=batch_size, pause_ms=pause_ms, clear=clear, reason=reason)

    async def samples(self, name: str) -> list[dict[str, Any]]:
        """The throughput samples of a registered migration: 10-second buckets of documents scanned, migrated, failed."""
        from .background import samples_in

        return await samples_in(self._project, name)

    async def failed_ids(self, name: str, *, limit: int = 100) -> tuple[list[Any], int]:
        """Up to ``limit`` ids of the documents that failed, and how many failed: only for whoever asks (never logged)."""
        from .background import failed_ids_in

        return await failed_ids_in(self._project, name, limit=limit)

    async def repin(self, name: str, *, reason: str | None = None) -> RepinResult:
        """Pin the file as it is on disk now (after a deploy changed it)."""
        from .background import repin_in

        return await repin_in(self._project, name, reason=reason)

    async def verify(self, names: list[str] | None = None, *, reopen: bool = False) -> list[Verified]:
        """Look once for old-shape documents written after each migration completed (``reopen``: one more pass)."""
        from .background import verify_in

        return await verify_in(self._project, names, reopen=reopen)

    async def watch(self, options: WatchOptions | None = None) -> list[WatchRecord]:
        """Run the live watcher until the session's ``cancel`` is set."""
        from .background import watch_in

        return await watch_in(self._project, options=options)

    async def watch_status(self) -> list[WatchRecord]:
        """Every collection's live watcher as last saved."""
        from .background import watch_status_in

        return await watch_status_in(self._project)

    async def preview(
        self,
        path: str,
        *,
        sample: int | None = None,
        first: int | None = None,
        revert: bool = False,
        validate: bool = False,
        steps: int | None = None,
    ) -> Preview:
        """What the engine would do to a few documents of the old shape; reads only."""
        from .background import preview_in

        return await preview_in(self._project, path, sample=sample, first=first, revert=revert, validate=validate, steps=steps)

    async def coordinate(self, name: str) -> CoordinatorStep:
        """One coordinator step (a job system's unit): what to do next."""
        from .background import coordinate_in

        return await coordinate_in(self._project, name)

    async def run_slice(self, name: str) -> SliceReport:
        """One slice of one lane (a job system's unit)."""
        from .background import run_slice_in

        return await run_slice_in(self._project, name)

    async def start_runner(
        self, *, concurrency: int = 1, on_error: ErrorCallback | None = None, watch: bool | WatchOptions = False
    ) -> BackgroundRunner:
        """A :class:`~mongoshift.api.background.BackgroundRunner` on this session, started: it runs every
        runnable migration until :meth:`~mongoshift.api.background.BackgroundRunner.stop`.

        It lives inside the session: it runs on the session's connection, its events go to the
        session's observers, and the session's ``cancel`` stops it too. Leaving the session stops
        it (its batches finished, its leases released, as ``stop()`` does) before the connection
        closes, so a runner never outlives the connection it runs on; a closed session refuses
        to start one. ``watch`` also runs the live watcher (True, or its ``WatchOptions``);
        ``on_error(migration, message)`` hears of a migration's trouble. Options are checked here.
        """
        from .background import BackgroundRunner

        self._project.check_open()
        runner = BackgroundRunner.on(self._project, concurrency=concurrency, on_error=on_error, watch=watch)
        self._runners = [r for r in self._runners if r.running]
        self._runners.append(runner)
        runner.start()
        return runner

    async def _stop_runners(self) -> None:
        """Stop every runner this session started that still runs (each as ``runner.stop()`` does)."""
        runners, self._runners = self._runners, []
        failures: list[BaseException] = []
        for runner in runners:
            try:
                await runner.stop()
            except Exception as exc:  # stop the others first: each holds leases
                failures.append(exc)
        if failures:
            raise failures[0]


class Intents:
    """A job system's intents on an open project: leases in the lock collection (``queue:<key>``)
    that say a migration is queued or running in one of its tasks (see :mod:`mongoshift.api.intents`).

    Every call of one task on one session: one connection, one check of the own collections."""

    def __init__(self, project: Project) -> None:
        self._project = project

    async def claim(self, claims: Iterable[Claim]) -> list[bool]:
        """Take each key as ``queued``, in order; False where a live record (queued or running) holds it."""
        from .intents import claim_intents_in

        return await claim_intents_in(self._project, claims)

    async def read(self, keys: Iterable[str]) -> dict[str, Intent]:
        """The records of ``keys`` that exist, by key; ``live``: a queued or running one still holds its key."""
        from .intents import read_intents_in

        return await read_intents_in(self._project, keys)

    async def settle(
        self, key: str, owner: str, state: IntentState | None, *, ttl_seconds: float, data: Mapping[str, Any] | None = None
    ) -> bool:
        """Move ``owner``'s record of ``key`` to ``state`` for ``ttl_seconds`` more (None: remove it); False when it is not ``owner``'s."""
        from .intents import settle_intent_in

        return await settle_intent_in(self._project, key, owner, state, ttl_seconds=ttl_seconds, data=data)
