"""``mongoshift audit``: one read-only look at the migration line and the background migrations, with a verdict.

Audit judges what the other commands already read (the status rows of ``status``, the lock
holder of ``lock``, the reports of ``background status`` and the traces lanes leave in the
store) by one table of checks, :data:`CHECKS`: each has a stable id, a severity and a rule.
It writes nothing (no lock, no index, no record), so it is safe to run from a monitor at any
time. Messages name migrations, never a document or its ``_id``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pymongo import AsyncMongoClient

from ..background.inspect.drift import look, unindexed
from ..background.inspect.status import BackgroundReport, report
from ..background.state.model import LaneSigns, State, WatchRecord, aware
from ..background.state.store import BackgroundStore
from ..errors import ConfigInvalidError, ExitCode
from ..line.plan import StatusRow, applied_out_of_order, fold_squashes, sorts_before_applied, status_rows
from ..project.lock import LockHolder
from ..project.session import Project, Session, open_session
from ..project.settings import Settings
from ..project.squashes import stranded_files
from ..project.wording import plural
from .options import one_shot

Severity = Literal["warn", "fail"]
Verdict = Literal["ok", "warn", "fail"]

#: How long a pending migration may wait for a runner, or a running one go without a lane, before audit warns.
DEFAULT_STALE_AFTER_SECONDS = 900.0
#: The longest ``stale_after``: a year (infinity, or a number no ``timedelta`` holds, is no waiting time).
MAX_STALE_AFTER_SECONDS = 31_536_000


@dataclass(frozen=True)
class Finding:
    """One problem: which check found it, how serious it is, which migration (or ``lock``) it is about, and why."""

    check: str
    severity: Severity
    subject: str
    message: str


@dataclass
class AuditReport:
    """Every finding, the checks that ran, and the time they were judged at (the server's clock by default)."""

    findings: list[Finding]
    checks: list[str]
    checked_at: datetime
    stale_after_seconds: float

    @property
    def verdict(self) -> Verdict:
        severities = {f.severity for f in self.findings}
        return "fail" if "fail" in severities else "warn" if severities else "ok"

    @property
    def exit_code(self) -> ExitCode:
        return {"ok": ExitCode.OK, "warn": ExitCode.AUDIT_WARNINGS, "fail": ExitCode.AUDIT_FAILED}[self.verdict]

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "exit_code": int(self.exit_code),
            "findings": [f.__dict__ for f in self.findings],
            "checks": self.checks,
            "checked_at": self.checked_at.isoformat(),
            "stale_after_seconds": self.stale_after_seconds,
        }


# ---------------------------------------------------------------- what audit reads


@dataclass
class BackgroundFacts:
    """One registered background migration as audit sees it."""

    state: State
    report: BackgroundReport
    signs: LaneSigns
    old_plans: int
    file: Literal["same", "changed", "missing"]
    #: Old-shape documents exist again after it completed (``background verify``'s probe; False when not probed).
    drift: bool = False
    #: Completed, but drift cannot be probed: the collection has no version index (its key).
    unprobed_index: str | None = None
    #: Not ended, and its batches will scan the collection: it has no version index (its key).
    unindexed: str | None = None
    #: The newest completed migration of its collection, with documents below its version that no migration upgrades.
    stranded: bool = False


@dataclass
class Facts:
    """Everything the checks judge, read once; the rules below are pure functions of it."""

    now: datetime
    stale_after: timedelta
    rows: list[StatusRow]
    sorts_before_applied: list[str]
    latest_applied: str | None
    applied_out_of_order: list[str]
    lock: LockHolder | None
    lock_holder_gone: bool
    background: list[BackgroundFacts] = field(default_factory=list)
    unreadable_states: list[str] = field(default_factory=list)
    #: Each live watcher's record, with its lease (None: no lease document).
    watchers: list[tuple[WatchRecord, LockHolder | None]] = field(default_factory=list)
    #: The ``use_transaction`` setting: every file that does not say otherwise runs in a transaction.
    use_transaction: bool = False
    #: Whether the server runs transactions (a replica set or mongos); a standalone server does not.
    transactions: bool = True

    @property
    def registered(self) -> set[str]:
        """Names with a background state: their file is judged by the background checks."""
        return {b.state.name for b in self.background} | set(self.unreadable_states)

    def idle(self, *traces: datetime | None) -> bool:
        """No trace newer than ``stale_after`` (a trace without a time does not count)."""
        latest = _latest(traces)
        return latest is None or self.now - latest >= self.stale_after

    def minutes_since(self, *traces: datetime | None) -> str:
        latest = _latest(traces)
        return "ever" if latest is None else f"{int((self.now - latest).total_seconds() // 60)} min"


def _latest(traces: Iterable[datetime | None]) -> datetime | None:
    return max((t for t in (aware(x) for x in traces) if t is not None), default=None)


async def _background(session: Session, store: BackgroundStore) -> tuple[list[BackgroundFacts], list[str]]:
    files = {f.name: f for f in session.files}
    states, unreadable = await store.readable_states()
    found = []
    for state in states:
        item = files.get(state.name)
        file: Literal["same", "changed", "missing"] = (
            "missing" if item is None else "same" if not state.checksum or item.checksum == state.checksum else "changed"
        )
        current = (state.plan or {}).get("token")
        old_plans = len([t for t in await store.plan_tokens(state.name) if t != current])
        found.append(BackgroundFacts(state, await report(store, state), await store.lane_signs(state.name), old_plans, file))
    looked = {v.migration: v for v in await look(session.db, states, session.declarations())}
    for b in found:
        seen = looked.get(b.state.name)
        b.drift = seen is not None and seen.found
        b.stranded = seen is not None and seen.stranded
        b.unprobed_index = seen.detail if seen is not None and seen.reason == "no_index" else None
        b.unindexed = await unindexed(session.db, b.state)
    return found, unreadable


async def _facts(session: Session, *, now: datetime | None, stale_after: float) -> Facts:
    settings = session.settings
    records = await session.changelog.records()
    rows = status_rows(session.files, records, stranded=stranded_files(settings.migrations_dir))
    records, _ = fold_squashes(session.files, records)  # a squash file stands for the files it replaced
    late, latest = sorts_before_applied([r.name for r in rows if r.pending], records)
    holder = await session.new_lock().holder()
    # Built without ensure_indexes: audit creates nothing, not even an index.
    store = BackgroundStore(session.db, settings.background_collection, create_indexes=False)
    background, unreadable = await _background(session, store)
    watchers = [(w, await session.new_lock(f"watch:{w.collection}").holder()) for w in await store.watch_records()]
    # the server's clock stamped every time audit compares with (a skewed client cannot fake staleness)
    hello = await session.client.admin.command("hello")
    return Facts(
        now=aware(now) or aware(hello.get("localTime")) or datetime.now(UTC),
        use_transaction=settings.use_transaction,
        transactions="setName" in hello or hello.get("msg") == "isdbgrid",
        stale_after=timedelta(seconds=stale_after),
        rows=rows,
        sorts_before_applied=late,
        latest_applied=latest,
        applied_out_of_order=applied_out_of_order(records),
        lock=holder,
        lock_holder_gone=holder is not None and holder.gone(),
        background=background,
        unreadable_states=unreadable,
        watchers=watchers,
    )


# ---------------------------------------------------------------- the checks

Rule = Callable[[Facts], Iterable[tuple[str, str]]]


@dataclass(frozen=True)
class Check:
    id: str
    severity: Severity
    rule: Rule


def _line(facts: Facts, state: str) -> list[StatusRow]:
    return [r for r in facts.rows if r.state == state and r.name not in facts.registered]


def _missing(facts: Facts) -> Iterable[tuple[str, str]]:
    for row in _line(facts, "missing"):
        if row.found_in:  # status's words (line.plan.missing_words)
            yield row.name, (
                f"applied, but its file is in {row.found_in}, which no squash file names (a squash that did not finish, "
                "or a squash file deleted by hand): move it back into the migrations folder"
            )
        else:
            yield row.name, "applied, but its file is not in the migrations folder (it cannot be rolled back)"


def _squash_partial(facts: Facts) -> Iterable[tuple[str, str]]:
    for row in _line(facts, "partial"):
        yield row.name, (
            f"in between this squash ({row.squash}): a run of it that stopped here is finished by the next 'up'; "
            "otherwise 'up' refuses until the release before the squash applies the rest"
        )


def _checksum(facts: Facts) -> Iterable[tuple[str, str]]:
    for row in _line(facts, "applied"):
        if row.checksum == "mismatch":
            yield row.name, "changed on disk after it was applied (checksum mismatch): restore the applied version"


def _failed(facts: Facts) -> Iterable[tuple[str, str]]:
    for row in _line(facts, "failed"):
        yield row.name, "its last run failed (see 'mongoshift status'); it is still pending"


def _pending(facts: Facts) -> Iterable[tuple[str, str]]:
    for row in facts.rows:
        if row.state in ("pending", "reverted"):
            yield row.name, "rolled back, not applied" if row.state == "reverted" else "not applied yet ('mongoshift up')"


def _out_of_order(facts: Facts) -> Iterable[tuple[str, str]]:
    for name in facts.applied_out_of_order:
        yield name, "applied after a migration that sorts after it: a fresh database applies them in another order"
    for name in facts.sorts_before_applied:
        yield name, f"pending, and sorts before the latest applied migration ({facts.latest_applied}): 'up' would apply it out of order"


def _transactions(facts: Facts) -> Iterable[tuple[str, str]]:
    # the setting only: a file's own use_transaction is known once it is imported, which audit never does
    if facts.use_transaction and not facts.transactions:
        yield "use_transaction", (
            "use_transaction is on, but this server is standalone (no transactions): every migration that does not "
            "set use_transaction = False fails; use a replica set, or turn the setting off"
        )


def _lock(facts: Facts) -> Iterable[tuple[str, str]]:
    holder = facts.lock
    if holder is None:
        return
    expires = aware(holder.expires_at)
    if expires is not None and expires <= facts.now:
        why = f"expired at {expires.isoformat(timespec='seconds')} without being released"
    elif facts.lock_holder_gone:
        why = "is held by a process of this host that no longer runs"
    else:
        return
    yield "lock", f"the migration lock of {holder.describe()} {why} (a killed run?): the next run takes it over, or 'mongoshift unlock --yes' clears it"


def _with_status(facts: Facts, status: str) -> list[BackgroundFacts]:
    return [b for b in facts.background if b.state.status == status]


def _background_failed(facts: Facts) -> Iterable[tuple[str, str]]:
    for b in _with_status(facts, "failed"):
        name = b.state.name
        yield name, f"failed (the reason: 'mongoshift background status {name}'; 'mongoshift background retry {name}' takes it up again)"


def _pending_idle(facts: Facts) -> Iterable[tuple[str, str]]:
    for b in _with_status(facts, "pending"):
        traces = (b.state.registered_at, b.state.updated_at, b.signs.last_seen)
        if facts.idle(*traces):
            since = facts.minutes_since(*traces)
            yield b.state.name, f"pending, and no runner has taken it for {since}: is a runner up? ('mongoshift background run {b.state.name}')"


def _running_idle(facts: Facts) -> Iterable[tuple[str, str]]:
    for b in _with_status(facts, "running"):
        traces = (b.state.updated_at, b.signs.last_seen)
        if not b.signs.live_leases(facts.now) and facts.idle(*traces):
            since = facts.minutes_since(*traces)
            yield b.state.name, f"running, but no lane has worked it for {since}: is a runner up? ('mongoshift background run {b.state.name}')"


def _paused(facts: Facts) -> Iterable[tuple[str, str]]:
    for b in _with_status(facts, "paused"):
        yield b.state.name, f"paused ('mongoshift background resume {b.state.name}' continues it)"


def _cancelled(facts: Facts) -> Iterable[tuple[str, str]]:
    for b in _with_status(facts, "cancelled"):
        yield b.state.name, (
            "cancelled before it completed: documents it did not reach keep the old shape "
            f"('mongoshift background retry {b.state.name}' takes it up again)"
        )


def _failed_partitions(facts: Facts) -> Iterable[tuple[str, str]]:
    for b in facts.background:
        if b.report.partitions_failed and b.state.status != "failed":
            yield b.state.name, f"{plural(b.report.partitions_failed, 'partition')} failed; the next pass takes their documents up again"


def _old_plans(facts: Facts) -> Iterable[tuple[str, str]]:
    for b in facts.background:
        if b.old_plans:
            yield b.state.name, (
                f"partitions of {plural(b.old_plans, 'plan')} other than the current one are stored "
                "(a planner that died before its plan was adopted, or one cutting a plan right now)"
            )


def _document_errors(facts: Facts) -> Iterable[tuple[str, str]]:
    for b in _with_status(facts, "completed"):
        if b.report.failed_documents:
            yield b.state.name, (
                f"completed, but {plural(b.report.failed_documents, 'document')} could not be migrated "
                f"(the reasons: 'mongoshift background status {b.state.name}')"
            )


def _drift(facts: Facts) -> Iterable[tuple[str, str]]:
    for b in facts.background:
        if b.drift:
            yield b.state.name, (
                "completed, but documents of the old shape were written since (an application version not redeployed?): "
                "'mongoshift background verify NAME --reopen' gives it one more pass"
            )


def _stranded(facts: Facts) -> Iterable[tuple[str, str]]:
    for b in facts.background:
        if b.stranded:
            yield b.state.name, (
                f"documents of {b.state.collection} are below version {b.state.spec.get('to_version')} at a version no "
                "migration upgrades (written by an older application, or never versioned), or with a version that is not "
                "a number: no pass can rewrite them; a migration from their version can (a version that is not a number, "
                "such as text, cannot be migrated from: store it as a number)"
            )


def _no_version_index(facts: Facts) -> Iterable[tuple[str, str]]:
    for b in facts.background:
        if b.unprobed_index is not None:
            yield b.state.name, (
                f"completed, but old shapes written since cannot be looked for: the collection has no version index "
                f"{b.unprobed_index} (batches and the probe scan without it; declare versioning and run converge, or create it)"
            )
        elif b.unindexed is not None:
            yield b.state.name, (
                f"{b.state.status}, and {b.state.collection} has no version index {b.unindexed}: each batch will scan the "
                "collection instead of reading its next documents through it (declare versioning and run converge, or create it)"
            )


def _file(kind: Literal["changed", "missing"], message: str) -> Rule:
    """The finding of each migration whose file is ``kind``; ``NAME`` in ``message`` becomes its name."""
    def rule(facts: Facts) -> Iterable[tuple[str, str]]:
        return [(b.state.name, message.replace("NAME", b.state.name)) for b in facts.background if b.file == kind]

    return rule


def _no_state(facts: Facts) -> Iterable[tuple[str, str]]:
    for name in facts.unreadable_states:
        yield name, (
            "its background state record lacks a field the engine needs, or holds one of the wrong type: it cannot run "
            f"(restore it, or delete it and 'mongoshift up --force {name}' registers it again)"
        )
    for row in facts.rows:
        if row.kind == "background" and row.state == "applied" and row.name not in facts.registered:
            yield row.name, f"applied as a background migration, but it has no background state ('mongoshift up --force {row.name}' registers it again)"


def _watcher_leaderless(facts: Facts) -> Iterable[tuple[str, str]]:
    for record, lease in facts.watchers:
        if record.state == "stopped":
            continue  # stopped on purpose (Ctrl-C, SIGTERM): nobody is meant to lead it
        expires = aware(lease.expires_at) if lease is not None else None
        live = expires is not None and expires > facts.now
        if not live and facts.idle(record.updated_at):
            yield record.collection, (
                f"the live watcher of {record.collection} has had no live leader for {facts.minutes_since(record.updated_at)} "
                "(its process died?): old shapes written since wait for the next leader ('mongoshift background watch')"
            )


#: Every check, in the order findings are listed. Ids are stable (scripts may match them).
CHECKS: tuple[Check, ...] = (
    Check("line.missing", "fail", _missing),
    Check("line.checksum", "fail", _checksum),
    Check("line.failed", "fail", _failed),
    Check("line.squash_partial", "fail", _squash_partial),
    Check("line.transactions", "fail", _transactions),
    Check("line.pending", "warn", _pending),
    Check("line.out_of_order", "warn", _out_of_order),
    Check("line.lock_stale", "warn", _lock),
    Check("background.failed", "fail", _background_failed),
    Check("background.pending_idle", "warn", _pending_idle),
    Check("background.running_idle", "warn", _running_idle),
    Check("background.paused", "warn", _paused),
    Check("background.cancelled", "warn", _cancelled),
    Check("background.failed_partitions", "warn", _failed_partitions),
    Check("background.old_plan", "warn", _old_plans),
    Check("background.document_errors", "warn", _document_errors),
    Check("background.drift", "warn", _drift),
    Check("background.stranded", "warn", _stranded),
    Check("background.no_version_index", "warn", _no_version_index),
    Check(
        "background.file_changed", "warn",
        _file("changed", "the file differs from the registered version: runners wait for it ('mongoshift background repin NAME' adopts it)"),
    ),
    Check("background.file_missing", "warn", _file("missing", "the file is not in the migrations folder: runners wait for it to be deployed")),
    Check("background.no_state", "warn", _no_state),
    Check("background.watcher_leaderless", "warn", _watcher_leaderless),
)


def judge(facts: Facts) -> list[Finding]:
    """The findings of every check, in table order."""
    return [Finding(check.id, check.severity, subject, message) for check in CHECKS for subject, message in check.rule(facts)]


async def audit(
    settings: Settings,
    *,
    stale_after: float | None = None,
    now: datetime | None = None,
    client: AsyncMongoClient[Any] | None = None,
) -> AuditReport:
    """One-shot :meth:`Mongoshift.audit <mongoshift.api.session.Mongoshift.audit>`."""
    return await audit_in(one_shot(settings, client=client), stale_after=stale_after, now=now)


async def audit_in(project: Project, *, stale_after: float | None = None, now: datetime | None = None) -> AuditReport:
    """Judge the project's health without writing anything; ``report.exit_code`` is the CLI's verdict.

    ``stale_after``: seconds a pending migration may wait for a runner, or a running one go without
    a lane, before it is a finding (None: :data:`DEFAULT_STALE_AFTER_SECONDS`). ``now``: the time to
    judge at (default: the server's clock).
    """
    if stale_after is None:
        stale_after = DEFAULT_STALE_AFTER_SECONDS
    if isinstance(stale_after, bool) or not isinstance(stale_after, (int, float)) or not 0 <= stale_after <= MAX_STALE_AFTER_SECONDS:
        raise ConfigInvalidError(f"--stale-after (stale_after) must be a number of seconds from 0 to {MAX_STALE_AFTER_SECONDS:,} (a year)")
    if now is not None and (not isinstance(now, datetime) or now.tzinfo is None):
        raise ConfigInvalidError("now must be a datetime with its time zone (datetime.now(UTC)), or None")
    async with open_session(project.settings, take_lock=False, cancel=project.cancel, project=project) as session:
        facts = await _facts(session, now=now, stale_after=stale_after)
    return AuditReport(judge(facts), [check.id for check in CHECKS], facts.now, stale_after)
