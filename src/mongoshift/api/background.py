"""Background migrations as an async Python API; ``mongoshift background ...`` is a thin layer over it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from pymongo import AsyncMongoClient

from ..background.inspect.drift import Verified, verify as verify_drift
from ..background.inspect.preview import Preview, preview as preview_documents, preview_size
from ..background.inspect.status import (
    BackgroundReport,
    PartitionRow,
    per_shard as per_shard,  # the API's, re-exported: background_shard_progress
    report,
)
from ..background.inspect.validate import steps_count
from ..background.lanes.engine import Engine, load_background, open_engine
from ..background.lanes.throttle import sleep
from ..background.state.controls import (
    REASON_LIMIT as REASON_LIMIT,  # the longest reason a control takes (the dashboard's forms)
    Action,
    ControlResult,
    RepinResult,
    ThrottleResult,
    checked_pace,
    control,
    pin,
    throttle,
)
from ..background.state.events import Event, Observer
from ..background.state.model import State, WatchRecord
from ..background.watch.watcher import Watcher, WatchOptions
from ..errors import (
    BackgroundFileChangedError,
    ConfigInvalidError,
    ConnectionFailedError,
    FileNotFoundMigrationError,
    MongoshiftError,
    NotAppliedError,
)
from ..project.changelog import ChangelogRecord
from ..project.loader import resolve_name
from ..project.own_collections import own_collections
from ..project.redaction import describe_error, redact
from ..project.run import CancelSignal, LinkedCancel
from ..project.session import Project, open_session
from ..project.settings import Settings
from .options import checked_flags, checked_function, checked_names, one_shot, run_observers

log = logging.getLogger("mongoshift.background")


def _engine(project: Project, observers: Iterable[Observer] = (), *, reading: bool = False) -> AbstractAsyncContextManager[Engine]:
    """The engine on one run of ``project``; ``observers`` (checked, with OpenTelemetry for a writing call) get its events.
    ``reading``: the call only reads the engine's state, and makes no index (nor a database that did not exist)."""
    return open_engine(project.settings, cancel=project.cancel, observers=observers, project=project, reading=reading)


async def _registered(engine: Engine, name: str) -> str:
    """The registered migration NAME names: with or without ``.py``, or as a path into the migrations
    folder (as a shell completes it, and as the line's commands take it)."""
    return (await _registered_state(engine, name)).name


async def _registered_state(engine: Engine, name: str) -> State:
    """:func:`_registered`, with the state that showed it registered."""
    name = resolve_name(name, engine.settings.migrations_dir)
    wanted = name if name.endswith(".py") else name + ".py"
    state = await engine.store.state(wanted)
    if state is None:
        changelog = engine.context.changelog
        record = await changelog.record(wanted) if changelog is not None else None
        hint = _unregistered_hint(engine.settings, wanted, record)
        raise NotAppliedError(f"{wanted} is not a registered background migration ({hint})", file=wanted)
    return state


def _unregistered_hint(settings: Settings, wanted: str, record: ChangelogRecord | None = None) -> str:
    """What to do about a name that is not registered: 'up' registers a file that exists; for a typo,
    pointing at 'up' would send the user to run every pending migration for nothing. A file the
    changelog already holds applied (``baseline``, an import) is one 'up' passes over: it is never
    registered, so 'up' would answer "nothing to do"."""
    if record is not None and record.status == "applied":
        how = f"recorded applied by {redact(record.origin, limit=60)}" if record.origin else "recorded applied"
        return (
            f"it is {how} without being registered, so the engine does not run it and 'mongoshift up' passes over it; "
            f"'mongoshift up {wanted} --force' registers it, to run it after all"
        )
    try:
        exists = (settings.migrations_dir / wanted).is_file()
    except (OSError, ValueError):  # a name too long for the file system, a NUL: no such file either way
        exists = False
    if exists:
        return "run 'mongoshift up' first: it registers the background migration the file defines"
    return "no file of that name in the migrations folder either; 'mongoshift background status' lists the registered ones"


async def run(
    settings: Settings,
    names: list[str] | None = None,
    *,
    concurrency: int = 1,
    cancel: CancelSignal | None = None,
    observers: Iterable[Observer] = (),
    once: bool = False,
    client: AsyncMongoClient[Any] | None = None,
) -> list[BackgroundReport]:
    """One-shot ``Mongoshift.background.run`` (:func:`run_in`)."""
    return await run_in(one_shot(settings, client=client, observers=observers, cancel=cancel), names, concurrency=concurrency, once=once)


async def run_in(project: Project, names: list[str] | None = None, *, concurrency: int = 1, once: bool = False) -> list[BackgroundReport]:
    """Run the named migrations (None: every runnable one) in this process until each ends.

    ``once``: one round each (one coordinator step and one slice's time per lane, slice_ms) instead; a report whose
    status is still ``pending``, ``running`` or ``blocked`` has work left (``remaining`` estimates it).
    A migration whose file is missing or differs from the registered version holds up no other:
    the others run first, and its error (exit 8 or 38, after the wait bound) is raised once they
    did, with their reports in ``details["background"]``.
    """
    _check_concurrency(concurrency)
    checked_flags(once=once)
    names = checked_names(names)
    async with _engine(project, run_observers(project.observers, project.settings)) as engine:
        if names is None:
            found = [s for s in await engine.store.states_all() if s.status in ("blocked", "pending", "running")]
        else:
            found = [await _registered_state(engine, n) for n in names]
        # once each, however it is named (``NAME``, ``NAME.py``, ``migrations/NAME.py``): a name given twice ran twice
        read = {s.name: s for s in reversed(found)}  # the first read of each (dicts keep the first key's place)
        targets = _after_what_they_wait_for(list(dict.fromkeys(s.name for s in found)), read)
        targets.sort(key=engine.absent)  # stable: a file not deployed here yet is waited for last
        reports = []
        unrunnable: list[MongoshiftError] = []
        for index, name in enumerate(targets):
            if engine.context.cancel.is_set():
                # Stopped before this one started: it is still reported, as it stands, so that the run's verdict
                # counts it unfinished (exit 11) instead of taking a run that left it out for a finished one.
                reports.append(await report(engine.store, read[name]))
                continue
            try:
                # The first runs from the state just read; a later one reads its own, as the runs before it took their time.
                ended = await engine.run_one(name, concurrency, once=once, state=read[name] if index == 0 else None)
            except (FileNotFoundMigrationError, BackgroundFileChangedError) as exc:
                if len(targets) > 1:
                    log.warning("%s", exc.message)
                unrunnable.append(exc)
                continue
            # The run ends on a state it has just read (or that its last write returned): the report's.
            state = ended if ended is not None else await engine.store.state(name)
            if state is not None:
                reports.append(await report(engine.store, state))
        if unrunnable:
            raise _unrunnable(unrunnable, reports)
        return reports


def _after_what_they_wait_for(names: list[str], states: dict[str, Any]) -> list[str]:
    """``names`` in their order, but each after the ones of the run it waits for: run in turn, a migration blocked
    on one that comes later in the run would wait for it for ever (a revert waits for the reverts of the later
    migrations of its collection, which sort after it)."""
    left, ordered = list(names), []
    while left:
        ready = next((n for n in left if not set(states[n].waits_for) & (set(left) - {n})), left[0])  # a cycle: as given
        ordered.append(ready)
        left.remove(ready)
    return ordered


def _unrunnable(errors: list[MongoshiftError], reports: list[BackgroundReport]) -> MongoshiftError:
    """The first file error of a run, naming every migration whose file was missing or changed, with the others' reports."""
    first = errors[0]
    by_kind = {
        kind: [str(e.details.get("file")) for e in errors if isinstance(e, cls)]
        for kind, cls in (("missing", FileNotFoundMigrationError), ("file_changed", BackgroundFileChangedError))
    }
    message = first.message
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more: {', '.join(str(e.details.get('file')) for e in errors[1:])})"
    if reports:
        message += "; the others ran: " + ", ".join(f"{r.name} {r.status}" for r in reports)
    return type(first)(message, **{**first.details, **by_kind, "background": [r.to_json() for r in reports]})


async def status(settings: Settings, name: str | None = None, *, client: AsyncMongoClient[Any] | None = None) -> list[BackgroundReport]:
    """One-shot ``Mongoshift.background.status`` (:func:`status_in`)."""
    return await status_in(one_shot(settings, client=client), name)


async def status_in(project: Project, name: str | None = None) -> list[BackgroundReport]:
    """The report of one registered migration (None: of every one)."""
    async with _engine(project, reading=True) as engine:
        if name is not None:
            return [await report(engine.store, await _registered_state(engine, name))]
        return [await report(engine.store, s) for s in await engine.store.states_all()]


async def partitions(settings: Settings, name: str, *, client: AsyncMongoClient[Any] | None = None) -> list[PartitionRow]:
    """One-shot ``Mongoshift.background.partitions`` (:func:`partitions_in`)."""
    return await partitions_in(one_shot(settings, client=client), name)


async def partitions_in(project: Project, name: str) -> list[PartitionRow]:
    """The partitions of one registered migration."""
    async with _engine(project, reading=True) as engine:
        state = await _registered_state(engine, name)
        return [PartitionRow.of(p) for p in await engine.store.partitions_of(state)]


async def apply_control(
    settings: Settings,
    name: str,
    action: Action,
    *,
    reason: str | None = None,
    from_start: bool = False,
    observers: Iterable[Observer] = (),
    client: AsyncMongoClient[Any] | None = None,
) -> ControlResult:
    """One-shot ``Mongoshift.background.control`` (:func:`control_in`)."""
    return await control_in(one_shot(settings, client=client, observers=observers), name, action, reason=reason, from_start=from_start)


async def control_in(project: Project, name: str, action: Action, *, reason: str | None = None, from_start: bool = False) -> ControlResult:
    """Pause, resume, cancel or retry a registered migration (``from_start``: retry from the beginning)."""
    if action not in get_args(Action):
        raise ConfigInvalidError(f"action must be one of {', '.join(get_args(Action))}, not {action!r}")
    checked_flags(from_start=from_start)
    settings = project.settings
    async with _engine(project, project.observers) as engine:
        result = await control(
            engine.store,
            await _registered(engine, name),
            action,
            by=engine.session.run.executed_by,
            reason=reason,
            from_start=from_start,
            lock_collection=settings.lock_collection,
        )
        engine.context.events.emit("control", result.name, action=action, applied=result.applied, status=result.status)
        return result


def check_throttle(
    batch_size: int | None = None, pause_ms: int | None = None, *, clear: bool = False, names: Mapping[str, str] | None = None
) -> None:
    """Refuse (:class:`~mongoshift.errors.ThrottleInvalidError`, exit 53) a pace that ``throttle`` would refuse,
    before anything connects. ``names``: how the caller's own fields are called in the refusal, by ``batch_size``
    and ``pause_ms`` (a form's labels; default: these parameters' names)."""
    checked_flags(clear=clear)
    if names is None:
        checked_pace(batch_size, pause_ms, clear=clear)
    else:
        checked_pace(batch_size, pause_ms, clear=clear, names=names)


async def apply_throttle(
    settings: Settings,
    name: str,
    *,
    batch_size: int | None = None,
    pause_ms: int | None = None,
    clear: bool = False,
    reason: str | None = None,
    observers: Iterable[Observer] = (),
    client: AsyncMongoClient[Any] | None = None,
) -> ThrottleResult:
    """One-shot ``Mongoshift.background.throttle`` (:func:`throttle_in`)."""
    project = one_shot(settings, client=client, observers=observers)
    return await throttle_in(project, name, batch_size=batch_size, pause_ms=pause_ms, clear=clear, reason=reason)


async def throttle_in(
    project: Project,
    name: str,
    *,
    batch_size: int | None = None,
    pause_ms: int | None = None,
    clear: bool = False,
    reason: str | None = None,
) -> ThrottleResult:
    """Set the operator's pace of a registered migration (``clear``: back to the file's), as a control: who, why, an event."""
    checked_flags(clear=clear)
    async with _engine(project, project.observers) as engine:
        result = await throttle(
            engine.store, await _registered(engine, name), batch_size=batch_size, pause_ms=pause_ms, clear=clear,
            by=engine.session.run.executed_by, reason=reason,
        )
        engine.context.events.emit("control", result.name, action="throttle", applied=result.applied, status=result.status, **(result.throttle or {}))
        return result


async def samples(settings: Settings, name: str, *, client: AsyncMongoClient[Any] | None = None) -> list[dict[str, Any]]:
    """One-shot ``Mongoshift.background.samples`` (:func:`samples_in`)."""
    return await samples_in(one_shot(settings, client=client), name)


async def samples_in(project: Project, name: str) -> list[dict[str, Any]]:
    """The throughput buckets the lanes recorded for ``name`` (see ``BackgroundStore.samples``), oldest first."""
    async with _engine(project, project.observers, reading=True) as engine:
        return await engine.store.samples(await _registered(engine, name))


async def failed_ids(settings: Settings, name: str, *, limit: int = 100, client: AsyncMongoClient[Any] | None = None) -> tuple[list[Any], int]:
    """One-shot ``Mongoshift.background.failed_ids`` (:func:`failed_ids_in`): ids, for whoever asks; never logged."""
    return await failed_ids_in(one_shot(settings, client=client), name, limit=limit)


async def failed_ids_in(project: Project, name: str, *, limit: int = 100) -> tuple[list[Any], int]:
    """Up to ``limit`` ids of the documents of ``name`` that failed, and their number: for an operator who asks; never logged."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ConfigInvalidError(f"limit must be a whole number, 0 or more, not {limit!r}")
    async with _engine(project, project.observers, reading=True) as engine:
        return await engine.store.failed_ids(await _registered_state(engine, name), limit)


async def repin(
    settings: Settings, name: str, *, reason: str | None = None, observers: Iterable[Observer] = (), client: AsyncMongoClient[Any] | None = None
) -> RepinResult:
    """One-shot ``Mongoshift.background.repin`` (:func:`repin_in`)."""
    return await repin_in(one_shot(settings, client=client, observers=observers), name, reason=reason)


async def repin_in(project: Project, name: str, *, reason: str | None = None) -> RepinResult:
    """Pin the file as it is on disk now (after a deploy changed it); replan when what it matches changed."""
    async with _engine(project, project.observers) as engine:
        wanted = await _registered(engine, name)
        spec, checksum = engine.loaded(wanted)
        result = await pin(engine.store, wanted, spec, checksum, by=engine.session.run.executed_by, reason=reason)
        await engine.session.changelog.repin(wanted, checksum)
        engine.context.events.emit("control", wanted, action="repin", applied=result.applied, replan=result.replan)
        return result


async def verify(
    settings: Settings,
    names: list[str] | None = None,
    *,
    reopen: bool = False,
    observers: Iterable[Observer] = (),
    client: AsyncMongoClient[Any] | None = None,
) -> list[Verified]:
    """One-shot ``Mongoshift.background.verify`` (:func:`verify_in`)."""
    return await verify_in(one_shot(settings, client=client, observers=observers), names, reopen=reopen)


async def verify_in(project: Project, names: list[str] | None = None, *, reopen: bool = False) -> list[Verified]:
    """Look once for old-shape documents written after each named (None: every) migration completed.

    ``reopen``: a migration where some are found gets one more pass (a runner does it); otherwise
    it is only reported. Each answer is also a ``drift`` event to the observers. No id is returned."""
    checked_flags(reopen=reopen)
    names = checked_names(names)
    async with _engine(project, project.observers, reading=not reopen) as engine:
        wanted = None if names is None else [await _registered(engine, n) for n in names]
        return await verify_drift(
            engine.session.db,
            engine.store,
            wanted,
            engine.session.declarations(),
            engine.context.events,
            reopen_found=reopen,
            by=engine.session.run.executed_by,
        )


async def watch(
    settings: Settings,
    options: WatchOptions | None = None,
    *,
    cancel: CancelSignal | None = None,
    observers: Iterable[Observer] = (),
    client: AsyncMongoClient[Any] | None = None,
) -> list[WatchRecord]:
    """One-shot ``Mongoshift.background.watch`` (:func:`watch_in`)."""
    return await watch_in(one_shot(settings, client=client, observers=observers, cancel=cancel), options=options)


async def watch_in(project: Project, *, options: WatchOptions | None = None) -> list[WatchRecord]:
    """Run the live watcher in this process until ``cancel`` is set; the records of the collections it watched.

    It never ends on its own: a collection is followed while another process leads it, led
    (streamed, upgraded, saved) otherwise. See docs/background.md, "The live watcher"."""
    if options is not None and not isinstance(options, WatchOptions):
        raise ConfigInvalidError(f"options must be a WatchOptions or None, not {type(options).__name__}")
    options = (options or WatchOptions()).check()
    async with _engine(project, project.observers) as engine:
        return await Watcher(engine, options).run()


async def watch_status(settings: Settings, *, client: AsyncMongoClient[Any] | None = None) -> list[WatchRecord]:
    """One-shot ``Mongoshift.background.watch_status`` (:func:`watch_status_in`)."""
    return await watch_status_in(one_shot(settings, client=client))


async def watch_status_in(project: Project) -> list[WatchRecord]:
    """Every collection's live watcher as last saved: state, guards, counters, leader (never its position)."""
    async with _engine(project, reading=True) as engine:
        return await engine.store.watch_records()


async def preview(
    settings: Settings,
    path: str,
    *,
    sample: int | None = None,
    first: int | None = None,
    revert: bool = False,
    cancel: CancelSignal | None = None,
    validate: bool = False,
    steps: int | None = None,
    client: AsyncMongoClient[Any] | None = None,
) -> Preview:
    """One-shot ``Mongoshift.background.preview`` (:func:`preview_in`)."""
    project = one_shot(settings, client=client, cancel=cancel)
    return await preview_in(project, path, sample=sample, first=first, revert=revert, validate=validate, steps=steps)


async def preview_in(
    project: Project,
    path: str,
    *,
    sample: int | None = None,
    first: int | None = None,
    revert: bool = False,
    validate: bool = False,
    steps: int | None = None,
) -> Preview:
    """What the engine would do to a few documents of the old shape: before, update, after (or the error).

    ``path`` names a background file of the migrations folder, registered or not. ``sample``: that
    many documents at random (5 by default); ``first``: the first ones by ``_id``; 1 to 1,000, not
    both. ``revert`` previews the declared revert. Reads only: no lock, no index, no record.

    ``validate``: each document's write is made, and judged by the server, in a transaction that is
    always aborted, with the transform in the sandbox; a step migration makes up to ``steps`` calls
    (1 by default, at most 100). ``Preview.refusals`` lists what the sandbox refused (the CLI exits
    34); a server without transactions raises ``TransactionsUnsupportedError`` (15)."""
    checked_flags(revert=revert, validate=validate)
    method, size = preview_size(sample, first)
    if steps is not None and not validate:
        raise ConfigInvalidError("--steps is for --validate of a step migration")
    step_count = steps_count(steps)
    settings = project.settings
    name = resolve_name(path, settings.migrations_dir)
    name = name if name.endswith(".py") else name + ".py"
    async with open_session(settings, take_lock=False, with_files=False, cancel=project.cancel, project=project) as session:
        spec, _ = load_background(session, name)
        return await preview_documents(
            session.db,
            name,
            spec,
            method=method,
            size=size,
            revert=revert,
            cancel=session.cancel,
            validate=validate,
            steps=step_count,
            protected=frozenset(own_collections(settings)),
        )


@dataclass(frozen=True)
class CoordinatorStep:
    """What one coordinator step of :func:`coordinate` decided: the job system's next move.

    ``next``: ``process`` (start ``lanes`` lane slices), ``wait`` / ``busy`` (ask again after a poll),
    ``done`` (``status`` is final, or paused)."""

    name: str
    next: Literal["process", "wait", "done", "busy"]
    lanes: int
    status: str | None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SliceReport:
    """One lane slice of :func:`run_slice`: its outcome (see :mod:`mongoshift.background.lanes.lane`), counters only."""

    name: str
    outcome: str
    status: str | None
    counters: dict[str, int] = field(default_factory=dict)
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


async def coordinate(
    settings: Settings, name: str, *, observers: Iterable[Observer] = (), client: AsyncMongoClient[Any] | None = None
) -> CoordinatorStep:
    """One-shot ``Mongoshift.background.coordinate`` (:func:`coordinate_in`)."""
    return await coordinate_in(one_shot(settings, client=client, observers=observers), name)


async def coordinate_in(project: Project, name: str) -> CoordinatorStep:
    """One coordinator step of a registered background migration, as ``background run --once`` starts its round.

    For a job system that drives the engine one step and one slice per task: nothing waits in
    this call. While this process's file is missing or differs from the registered version, a
    live migration answers ``wait`` (ask again later), a finished or paused one ``done``."""
    async with _engine(project, run_observers(project.observers, project.settings)) as engine:
        wanted = await _registered(engine, name)
        decision, state = await engine.step_once(wanted)
        if decision is not None:
            final = decision.state.status if decision.state is not None else None
            return CoordinatorStep(wanted, decision.next, decision.lanes, final, decision.reason)
        status = state.status if state is not None else None
        if state is None or status in ("completed", "failed", "cancelled", "paused"):
            return CoordinatorStep(wanted, "done", 0, status, "not registered" if state is None else status)
        reason = "the file is missing here" if engine.absent(wanted) else "the file differs from the registered version"
        return CoordinatorStep(wanted, "wait", 0, status, f"{reason} (a deploy in progress?); 'mongoshift background repin {wanted}' pins it")


async def run_slice(
    settings: Settings, name: str, *, observers: Iterable[Observer] = (), client: AsyncMongoClient[Any] | None = None
) -> SliceReport:
    """One-shot ``Mongoshift.background.run_slice`` (:func:`run_slice_in`)."""
    return await run_slice_in(one_shot(settings, client=client, observers=observers), name)


async def run_slice_in(project: Project, name: str) -> SliceReport:
    """One slice of one lane: claim a partition under a lease in MongoDB, work it until the slice ends.

    The lease (``background_lease_ttl_seconds``) is what makes a killed process harmless: its
    partition is reaped once the lease lapses and the next slice goes on from the checkpoint.
    ``stale``: the migration is not running, or this process's file cannot run it."""
    async with _engine(project, run_observers(project.observers, project.settings)) as engine:
        wanted = await _registered(engine, name)
        result = await engine.slice_once(wanted)
        state = await engine.store.state(wanted)
        return SliceReport(wanted, result.outcome, state.status if state is not None else None, dict(result.counters), result.error)


#: ``on_error(migration, message)``; ``migration`` is None when a round of the runner itself failed.
ErrorCallback = Callable[[str | None, str], object]


class BackgroundRunner:
    """Runs every runnable background migration inside an application's event loop.

    It never raises for a migration's trouble (its lanes retry, the others go on), so
    ``on_error`` is how the application hears of it: a failed slice, a failed migration, a
    changed file, a failed round. The message is redacted like every stored error.

    Built from settings (:func:`start_background_runner`), it connects when it starts (or runs
    on ``client``) and closes that connection when it stops. Built on a session
    (``ms.background.start_runner``, :meth:`on`), it runs on the session's connection, gives
    its events to the session's observers and stops when the session's ``cancel`` is set;
    leaving the session stops it (see :meth:`mongoshift.api.session.Background.start_runner`).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        concurrency: int = 1,
        observers: Iterable[Observer] = (),
        client: AsyncMongoClient[Any] | None = None,
        on_error: ErrorCallback | None = None,
        watch: bool | WatchOptions = False,
        cancel: CancelSignal | None = None,
    ) -> None:
        self._build(one_shot(settings, client=client, observers=observers, cancel=cancel), concurrency, on_error, watch)

    @classmethod
    def on(
        cls, project: Project, *, concurrency: int = 1, on_error: ErrorCallback | None = None, watch: bool | WatchOptions = False
    ) -> BackgroundRunner:
        """A runner on an open project (a session's): its connection, its observers, its ``cancel``."""
        runner = cls.__new__(cls)
        runner._build(project, concurrency, on_error, watch)
        return runner

    def _build(self, project: Project, concurrency: int, on_error: ErrorCallback | None, watch: bool | WatchOptions) -> None:
        """Every option checked when the runner is built: a wrong one would only show in a lane, or never."""
        _check_concurrency(concurrency)
        if on_error is not None:
            checked_function("on_error", on_error)
        self.watch = _check_watch(watch)
        self.observers = run_observers(project.observers, project.settings)
        self.settings = project.settings
        self.concurrency = concurrency
        self.on_error = on_error
        #: Set by :meth:`stop`; it also follows the project's own cancel (a session's), when it has one.
        self.cancel = CancelSignal() if project.cancel is None else LinkedCancel(project.cancel)
        self._project = project
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="mongoshift-background-runner")

    async def _loop(self) -> None:
        async with AsyncExitStack() as stack:
            engine = await self._open(stack)
            if engine is None:
                return
            watcher = asyncio.create_task(self._watch(engine), name="mongoshift-watcher") if self.watch else None
            while not self.cancel.is_set():
                try:
                    runnable = [s.name for s in await engine.store.states_all() if s.status in ("blocked", "pending", "running")]
                    for name in runnable:
                        if self.cancel.is_set():
                            break
                        try:
                            await engine.run_one(name, self.concurrency)
                        except (BackgroundFileChangedError, FileNotFoundMigrationError) as exc:  # the others can still run; this one is retried later
                            log.warning("%s", exc.message)
                            self._report(name, exc.message)
                except Exception as exc:
                    log.exception("the background runner hit an error; retrying")
                    self._report(None, describe_error(exc))
                await sleep(self.settings.background_poll_seconds * 1000, self.cancel)
            if watcher is not None:
                await watcher

    async def _open(self, stack: AsyncExitStack) -> Engine | None:
        """The engine, connecting again every poll while the server cannot be reached: an application
        that starts while MongoDB is down gets its runner once it is up, and hears of each failed
        attempt through ``on_error`` instead of a runner that died unseen. Any other failure (a
        refused login, a settings clash) is reported too, then ends the runner. None: stopped first."""
        observers = [*self.observers, self._forward_error] if self.on_error else self.observers
        while not self.cancel.is_set():
            try:
                return await stack.enter_async_context(open_engine(self.settings, cancel=self.cancel, observers=observers, project=self._project))
            except ConnectionFailedError as exc:
                log.warning("the background runner cannot connect; trying again: %s", exc.message)
                self._report(None, exc.message)
            except MongoshiftError as exc:
                self._report(None, exc.message)
                raise
            await sleep(self.settings.background_poll_seconds * 1000, self.cancel)
        return None

    async def _watch(self, engine: Engine) -> None:
        """The live watcher beside the lanes, on the same engine; it stops with the runner."""
        assert self.watch is not None
        while not self.cancel.is_set():
            try:
                await Watcher(engine, self.watch).run()
            except ConfigInvalidError as exc:  # a standalone server: watching again will not help
                self._report(None, exc.message)
                return
            except Exception as exc:
                log.exception("the live watcher hit an error; restarting it")
                self._report(None, describe_error(exc))
                await sleep(self.settings.background_poll_seconds * 1000, self.cancel)

    def _forward_error(self, event: Event) -> None:
        if event.kind == "slice_end" and event.data.get("error"):
            self._report(event.migration, str(event.data["error"]))
        elif event.kind == "failed":
            self._report(event.migration, str(event.data.get("reason") or "failed"))

    def _report(self, migration: str | None, message: str) -> None:
        if self.on_error is None:
            return
        try:
            self.on_error(migration, redact(message))
        except Exception:  # the application's callback must not stop the runner
            log.exception("the background runner's on_error callback failed")

    async def stop(self) -> None:
        """Finish the current batches, release every lease, and return."""
        self.cancel.set("runner stopped")
        if self._task is not None:
            await self._task
            self._task = None


async def start_background_runner(
    settings: Settings,
    *,
    concurrency: int = 1,
    on_error: ErrorCallback | None = None,
    watch: bool | WatchOptions = False,
    cancel: CancelSignal | None = None,
    observers: Iterable[Observer] = (),
    client: AsyncMongoClient[Any] | None = None,
) -> BackgroundRunner:
    """One-shot ``Mongoshift.background.start_runner``: a :class:`BackgroundRunner` on a connection of
    its own (or ``client``), started; it runs until :meth:`BackgroundRunner.stop` (or ``cancel``)."""
    runner = BackgroundRunner(settings, concurrency=concurrency, observers=observers, client=client, on_error=on_error, watch=watch, cancel=cancel)
    runner.start()
    return runner


def _check_watch(watch: object) -> WatchOptions | None:
    """``watch=``: False (none), True (the defaults) or a :class:`WatchOptions`."""
    if watch is False:
        return None
    if watch is True:
        return WatchOptions()
    if isinstance(watch, WatchOptions):
        return watch.check()
    raise ConfigInvalidError(f"watch must be True, False or a WatchOptions, not {type(watch).__name__}")


def _check_concurrency(concurrency: object) -> None:
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= 64:
        raise ConfigInvalidError(f"concurrency must be an integer from 1 to 64 (lanes in this process), not {concurrency!r}")
