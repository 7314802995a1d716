"""Any call of the API across a selection of tenant databases (docs/tenants.md).

:func:`across_tenants` selects the tenants (``[tenants]`` and :class:`Tenants`), connects once
per distinct server (another cluster on its first tenant, so that its failure is its tenants' rows),
then rolls ``call`` out over one :class:`~mongoshift.api.session.Mongoshift` per tenant: the
project's settings with that tenant's ``db`` (and the cluster a provider placed it on), sharing
the client, the migrations folder as read once, the observers and the cancel signal. Each tenant
keeps its own changelog, lock and background state, exactly as ``--db`` does. The ``*_across``
helpers judge the common calls' results (applied counts, ``status --check``).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pymongo import AsyncMongoClient
from pymongo.errors import PyMongoError

from ..errors import ConfigInvalidError, MongoshiftError, RunAbortedError, TenantsInvalidError
from ..project.connection import connect
from ..project.events import Event, Events, Observer
from ..project.loader import MigrationFile, find, import_first, refuse_irreversible, resolve_name
from ..project.run import CancelSignal
from ..project.server_errors import from_pymongo
from ..project.session import Project
from ..project.settings import Settings
from ..tenants.report import Judged, RolloutReport, TenantError
from ..tenants.rollout import DEFAULT_PARALLEL, Rollout, roll_out
from ..tenants.selection import PARAMETER_WORDS, SelectionWords, Tenant, TenantFlags, select
from .options import checked_client, checked_flags, checked_observers, checked_settings
from .session import Mongoshift

if TYPE_CHECKING:
    from ..line.plan import StatusRow
    from .migrations import RunReport


@dataclass(frozen=True)
class Tenants:
    """Which tenants, and how to roll out across them.

    ``names`` (``--tenant``), ``pattern`` (``--tenants``) or ``all`` (``--all-tenants``, the
    ``[tenants]`` selection): one of them. ``parallel`` tenants at once (default 4); the first
    ``canary`` tenants first, the others only if each of them succeeded; ``continue_on_error``
    goes on after a failure instead of starting no new tenant.
    """

    names: Sequence[str] = ()
    pattern: str | None = None
    all: bool = False
    parallel: int = DEFAULT_PARALLEL
    canary: int = 0
    continue_on_error: bool = False
    #: How a refusal of the selection names it: these parameters (default); the command line passes its flags.
    words: SelectionWords = field(default=PARAMETER_WORDS, kw_only=True, repr=False)

    def flags(self) -> TenantFlags:
        if isinstance(self.names, str):
            raise TenantsInvalidError("Tenants.names takes a list of database names, not one string")
        if not isinstance(self.names, (list, tuple)):  # an int, None or a mapping was a TypeError, or read by its keys
            raise TenantsInvalidError(f"Tenants.names takes a list of database names, not {type(self.names).__name__}")
        if self.pattern is not None and not isinstance(self.pattern, str):
            raise TenantsInvalidError(f"Tenants(pattern=...) takes a glob as text (for example 'tenant_*'), not {type(self.pattern).__name__}")
        _true_or_false("all", self.all)
        words = self.words if isinstance(self.words, SelectionWords) else PARAMETER_WORDS
        return TenantFlags(tuple(self.names), self.pattern, bool(self.all), words)

    def rollout(self) -> Rollout:
        _true_or_false("continue_on_error", self.continue_on_error)
        words = self.words if isinstance(self.words, SelectionWords) else PARAMETER_WORDS
        return Rollout(self.parallel, self.canary, bool(self.continue_on_error), words=words)


def _true_or_false(name: str, value: object) -> None:
    """A flag of :class:`Tenants`: ``all="no"`` would otherwise be taken for True by the truth of any value."""
    if not isinstance(value, bool):
        raise TenantsInvalidError(f"Tenants({name}=...) must be True or False, not {type(value).__name__}")


def reading_every(tenants: Tenants) -> Tenants:
    """``tenants`` for a call that judges every tenant (no canary, no stop at a failure), its words kept."""
    if not isinstance(tenants, Tenants):
        raise TenantsInvalidError(f"tenants must be a mongoshift Tenants(...), not {type(tenants).__name__}")
    return replace(tenants, canary=0, continue_on_error=True)


def judge_run(report: RunReport) -> Judged:
    """A writing call of the migration line: done when it ran something (a migration, or the converge after ``up``
    that changed indexes or validators), already at target when nothing."""
    applied = sum(1 for r in report.results if r.status == "applied")
    reverted = sum(1 for r in report.results if r.status == "reverted")
    did = bool(report.results) or (report.converge is not None and report.converge.changed)
    return Judged("done" if did else "already at target", applied=applied, rolled_back=reverted, result=report)


def judge_status(check: bool, settings: Settings | None = None) -> Callable[[list[StatusRow]], Judged]:
    """``status``: always done; with ``check`` a tenant behind fails with ``status --check``'s own code
    (its hint to run the background migrations names every tenant: ``settings`` without a ``db``)."""
    hint = None if settings is None else settings.model_copy(update={"db": None})

    def judged(rows: list[StatusRow]) -> Judged:
        from ..line.plan import status_verdict  # start-up time: the line's planner loads with a status

        verdict = status_verdict(rows, hint) if check else None
        error = TenantError(verdict[0].name.lower(), int(verdict[0]), verdict[1]) if verdict else None
        return Judged("done", error=error, result=rows)

    return judged


def judge_done(result: Any) -> Judged:
    """Any other call: done when it returned."""
    return Judged("done", result=result)


def tenant_settings(settings: Settings, tenant: Tenant) -> Settings:
    """The project's settings for one tenant: its ``db``, and the cluster a provider placed it on (that URI
    replaces ``uri``, ``uri_command`` and ``uri_factory``)."""
    update: dict[str, Any] = {"db": tenant.name}
    if tenant.uri is not None:
        update.update(uri=tenant.uri, uri_command=None, uri_factory=None)
    return settings.model_copy(update=update)


async def select_tenants(
    settings: Settings, tenants: Tenants, *, client: AsyncMongoClient[Any] | None = None, cancel: CancelSignal | None = None
) -> list[Tenant]:
    """The tenants ``tenants`` selects, in order, without running anything (a job system queues one task each);
    :class:`~mongoshift.errors.TenantsInvalidError` (46) when the selection is refused, ``RunAbortedError`` (11)
    when ``cancel`` is set meanwhile."""
    if not isinstance(tenants, Tenants):
        raise TenantsInvalidError(f"tenants must be a mongoshift Tenants(...), not {type(tenants).__name__}")
    flags = tenants.flags().check()
    base = Project(checked_settings(settings), checked_client(client))
    resolved = await base.resolve()
    opened: list[AsyncMongoClient[Any]] = []  # connected only when the selection reads the server's databases

    async def database_names() -> list[str]:
        if base.client is None and not opened:
            opened.append(await connect(resolved.model_copy(update={"db": resolved.db or "admin"})))
        server = base.client or opened[0]
        try:
            return list(await server.list_database_names())
        except PyMongoError as exc:
            raise from_pymongo(exc) from exc

    try:
        selected = await _unless_stopped(select(resolved, flags, database_names), cancel or CancelSignal())
        tenants.rollout().check(len(selected))
        return selected
    finally:
        for own in opened:
            await own.close()


async def across_tenants[T](
    settings: Settings,
    call: Callable[[Mongoshift], Awaitable[T]],
    tenants: Tenants,
    *,
    command: str = "call",
    judge: Callable[[T], Judged] = judge_done,
    scan: bool = True,
    client: AsyncMongoClient[Any] | None = None,
    observers: Iterable[Observer] = (),
    cancel: CancelSignal | None = None,
    prepare: Callable[[list[MigrationFile]], None] | None = None,
) -> RolloutReport:
    """``call`` on each selected tenant's session, as ``tenants`` says; a row per tenant, never an exception for one tenant's failure.

    Refused before anything runs (:class:`~mongoshift.errors.TenantsInvalidError`, exit 46): a bad
    selection or rollout option. ``scan``: read the migrations folder once first (a broken
    folder fails here, not in every tenant); commands that need no folder pass False.
    ``client``: the application's client for the project's own server (left open); tenants a
    provider placed elsewhere get one client per distinct URI, closed at the end.
    ``observers`` get every tenant's events and the rollout's ``tenant_start`` / ``tenant_end``.
    ``prepare``: checks the files once before any tenant runs (``up`` imports what it may run).
    """
    if not isinstance(tenants, Tenants):
        raise TenantsInvalidError(f"tenants must be a mongoshift Tenants(...), not {type(tenants).__name__}")
    # said once, before anything runs: in each tenant it was only an "unexpected TypeError" row
    if not callable(call):
        raise ConfigInvalidError(f"call must be a function given the tenant's session (lambda ms: ms.status()), not {type(call).__name__}")
    if not callable(judge):
        raise ConfigInvalidError(f"judge must be a function given the call's result, not {type(judge).__name__}")
    if not isinstance(command, str) or not command:
        raise ConfigInvalidError(f"command must be the non-empty text the report names the call by, not {command!r}")
    flags = tenants.flags()
    rollout = tenants.rollout()
    flags.check()
    rollout.check(max(rollout.canary, 1))  # the bound itself; the canary against the selection below
    listeners = checked_observers(observers)
    cancel = cancel or CancelSignal()
    base = Project(checked_settings(settings), checked_client(client), listeners, cancel)
    resolved = await base.resolve()
    own = base.client is None
    main = base.client or await connect(resolved.model_copy(update={"db": resolved.db or "admin"}), cancel=cancel)
    others: dict[str, AsyncMongoClient[Any] | MongoshiftError] = {}  # a client per other cluster, or why it failed
    connecting: dict[str, asyncio.Lock] = {}
    try:

        async def database_names() -> list[str]:
            try:
                return list(await main.list_database_names())
            except PyMongoError as exc:
                raise from_pymongo(exc) from exc

        selected = await _unless_stopped(select(resolved, flags, database_names), cancel)
        rollout.check(len(selected))
        files = base.scanned() if scan else None
        if prepare is not None and files is not None:
            prepare(files)  # a file that does not import fails the rollout once, before any tenant (exit 20)

        async def client_for(tenant: Tenant) -> AsyncMongoClient[Any]:
            """The tenant's cluster's client, connected on its first tenant: a cluster that cannot be reached
            fails its own tenants' rows (tried once), never the rollout."""
            uri = tenant.uri
            if uri is None or uri == resolved.uri:
                return main
            async with connecting.setdefault(uri, asyncio.Lock()):
                if uri not in others:
                    try:
                        others[uri] = await connect(resolved.model_copy(update={"uri": uri, "db": resolved.db or "admin"}), cancel=cancel)
                    except MongoshiftError as exc:
                        others[uri] = exc
            found = others[uri]
            if isinstance(found, MongoshiftError):
                raise found.with_traceback(None)
            return found

        async def run(tenant: Tenant, own_cancel: CancelSignal) -> Judged:
            shared = await client_for(tenant)
            project = Project(tenant_settings(resolved, tenant), shared, _stamped(listeners, tenant.name), own_cancel, files=files, resolved=True)
            return judge(await call(Mongoshift(project)))

        return await roll_out(command, selected, run, rollout, cancel=cancel, events=Events(listeners))
    finally:
        for other in others.values():
            if not isinstance(other, MongoshiftError):
                await other.close()
        if own:
            await main.close()


#: How often a selection in progress looks whether a stop was asked (as the lock's wait does).
STOP_POLL_SECONDS = 0.2


async def _unless_stopped(selecting: Awaitable[list[Tenant]], cancel: CancelSignal) -> list[Tenant]:
    """The selection, or :class:`RunAbortedError` as soon as a stop is asked while it is read: a provider or
    ``listDatabases`` may be slow to answer (or never answer), and Ctrl-C must not wait for it. An async provider
    is cancelled; a sync one is left to its daemon thread."""
    task = asyncio.ensure_future(selecting)
    try:
        while not task.done():
            if cancel.is_set():
                raise RunAbortedError(f"stopped ({cancel.reason or 'cancelled'}) while the tenants were being selected; no tenant ran", reason="cancelled")
            await asyncio.wait({task}, timeout=STOP_POLL_SECONDS)
        return task.result()
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait({task})  # its end (cancelled, or what it raised meanwhile) is no longer anyone's answer
            if not task.cancelled():
                task.exception()  # retrieved: not reported as never retrieved


#: The hooks of an observer that brackets runs (OpenTelemetry): it is bound to each call's ``db`` already.
_SCOPES = ("run_scope", "migration_scope", "coordinate_scope", "slice_scope")


def _stamped(observers: list[Observer], tenant: str) -> list[Observer]:
    """The observers of one tenant's calls: a plain function gets each event with ``tenant`` in its data;
    an observer with scope hooks (OpenTelemetry, bound to the tenant's ``db`` by the call) is passed as is."""

    def stamp(observer: Observer) -> Observer:
        if any(callable(getattr(observer, hook, None)) for hook in _SCOPES):
            return observer
        return lambda event: observer(Event(event.kind, event.migration, {**event.data, "tenant": tenant}, event.run_id))

    return [stamp(o) for o in observers]


def _known_options(call: Callable[..., Any], options: dict[str, Any], function: str) -> None:
    """Refuse, before anything runs, an option the session's call does not take (a typo would otherwise fail every
    tenant's row with an unexplained ``TypeError``)."""
    known = [name for name in inspect.signature(call).parameters if name != "self"]
    unknown = [name for name in options if name not in known]
    if unknown:
        raise ConfigInvalidError(
            f"{function} takes no option {', '.join(unknown)}: it takes {', '.join(known)}, client, observers and cancel",
            unknown=unknown,
        )


async def up_across(settings: Settings, tenants: Tenants, **options: Any) -> RolloutReport:
    """``up`` on each selected tenant (``options``: those of :meth:`Mongoshift.up`); rows judged by :func:`judge_run`."""
    client, observers, cancel = options.pop("client", None), options.pop("observers", ()), options.pop("cancel", None)
    _known_options(Mongoshift.up, options, "up_across")
    checked_settings(settings)
    return await across_tenants(
        settings, lambda ms: ms.up(**options), tenants, command="up", judge=judge_run, client=client, observers=observers, cancel=cancel,
        prepare=imports_for_up(settings, options.get("target"), options.get("to")),
    )


def imports_for_up(settings: Settings, target: str | None, to: str | None) -> Callable[[list[MigrationFile]], None]:
    """``prepare`` of an ``up`` across tenants: every file it may run imported once, before any tenant."""

    def imported(files: list[MigrationFile]) -> None:
        bare = [None if name is None else resolve_name(name, settings.migrations_dir) for name in (target, to)]
        for name in bare:
            if name is not None:
                find(files, name)  # a typo is every tenant's refusal (8), as for one database: said once
        import_first(files, target=bare[0], to=bare[1])

    return imported


async def down_across(settings: Settings, tenants: Tenants, **options: Any) -> RolloutReport:
    """``down`` on each selected tenant (``options``: those of :meth:`Mongoshift.down`)."""
    client, observers, cancel = options.pop("client", None), options.pop("observers", ()), options.pop("cancel", None)
    _known_options(Mongoshift.down, options, "down_across")
    checked_settings(settings)  # before the files are judged: a mapping of settings was an AttributeError
    return await across_tenants(
        settings, lambda ms: ms.down(**options), tenants, command="down", judge=judge_run, client=client, observers=observers, cancel=cancel,
        prepare=reversible_for_down(settings, options.get("target")),
    )


def reversible_for_down(settings: Settings, target: str | None) -> Callable[[list[MigrationFile]], None] | None:
    """``prepare`` of a ``down`` or ``redo`` of FILE across tenants: a file without ``down(ctx)`` is refused once
    (exit 13) before any tenant is touched, not tenant by tenant; None when no file is named (each tenant's
    own line says what it rolls back)."""
    if target is None:
        return None
    name = resolve_name(target, settings.migrations_dir)

    def checked(files: list[MigrationFile]) -> None:
        refuse_irreversible(files, name)

    return checked


async def status_across(settings: Settings, tenants: Tenants, *, check: bool = False, client: AsyncMongoClient[Any] | None = None) -> RolloutReport:
    """``status`` of each selected tenant (every tenant is read, whatever another's verdict); ``check``: a tenant behind fails."""
    checked_flags(check=check)
    checked_settings(settings)
    return await across_tenants(
        settings, lambda ms: ms.status(), reading_every(tenants), command="status", judge=judge_status(check, settings), client=client
    )


def migration_counts(report: RolloutReport) -> list[dict[str, Any]]:
    """``status --tenants``: per migration file, in how many tenants it is applied, pending (reverted and
    partial too: ``up`` runs them), failed (or another state)."""
    counts: dict[str, dict[str, int]] = {}
    for row in report.rows:
        rows: list[StatusRow] = row.result if isinstance(row.result, list) else []
        for status in rows:
            per = counts.setdefault(status.name, {})
            # reverted and partial are pending as the single-database status counts them: ``up`` runs them
            state = status.state if status.state == "failed" or not status.pending else "pending"
            per[state] = per.get(state, 0) + 1
    return [
        {
            "migration": name,
            "applied": per.get("applied", 0),
            "pending": per.get("pending", 0),
            "failed": per.get("failed", 0),
            "other": sum(n for state, n in per.items() if state not in ("applied", "pending", "failed")),
        }
        for name, per in sorted(counts.items())
    ]
