"""Running background migrations in this process: a coordinator loop and up to N lanes.

Several processes (on several machines) can run the same migration: the
leases share the partitions out and the slot index caps the lanes at
``max_parallel`` across all of them.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from pymongo.errors import PyMongoError

from ...errors import BackgroundFileChangedError, FileNotFoundMigrationError, MongoshiftError
from ...project.server_errors import connection_lost
from ...project.wording import plural
from ...schema.background import Background
from ..state.model import TERMINAL, State
from .context import EngineContext
from .coordinator import Coordinator
from .lane import Lane
from .outage import Outage
from .throttle import sleep

log = logging.getLogger("mongoshift.background")

#: The statuses of a migration that a runner works on (or waits for, blocked).
LIVE = ("blocked", "pending", "running")

#: How often a runner waiting for a changed or missing file says it still waits (each poll would be noise).
CHECKSUM_WAIT_LOG_SECONDS = 30.0

#: The file this process has for a migration: its spec and the checksum of the version imported;
#: None while the file is not in the migrations folder.
Loaded = tuple[Background, str] | None

#: Why this process's copy of a file cannot run: it differs from the registered version, or it is not there.
Mismatch = Literal["changed", "missing"]


@dataclass
class MigrationRun:
    """Runs one migration to an end state (or until cancelled) in this process."""

    engine: EngineContext
    coordinator: Coordinator
    poll_seconds: float = 2.0
    checksum_wait_seconds: float = 300.0
    reconnect_seconds: float = 300.0
    _slices: int = field(default=0, init=False)
    _asked_at: float | None = field(default=None, init=False)
    _outage: Outage = field(init=False)
    #: Why a migration's work stands still, as last said (per migration): the coordinator's step and the lanes say it once.
    _said: dict[str, str] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self._outage = Outage(self.reconnect_seconds, self.engine.now)

    async def run(
        self,
        name: str,
        spec: Background | None,
        *,
        concurrency: int = 1,
        checksum: str | None = None,
        reload: Callable[[], Loaded] | None = None,
        once: bool = False,
        state: State | None = None,
    ) -> State | None:
        """Drive ``name`` to an end state, or with ``once`` through one round: one coordinator step,
        one slice's time per lane (a partition done sooner is followed by the next), and one more step,
        which closes the pass when the round finished it.

        ``state``: the migration's state as the caller has just read it; the run starts from it
        instead of reading it again (and reads it afresh for every later round).

        ``checksum`` is the version of the file this process imported; ``spec`` None says the file
        is not in the migrations folder. While the registration pins another version, or the file is
        missing (a rolling deploy), it does not run the wrong code. A finished or paused migration
        has nothing to wait for: its state is returned at once. A live one waits, reloading the file
        with ``reload``, until the two agree, for at most ``checksum_wait_seconds``; then
        :class:`BackgroundFileChangedError` or :class:`FileNotFoundMigrationError`.

        A lost connection (see :mod:`.outage`) is ridden out: the round starts again from the
        state in MongoDB once a request succeeds, for at most ``reconnect_seconds`` without one."""
        wait = _FileWait(name, self.checksum_wait_seconds)
        try:
            while True:
                known, state = state, None  # after an outage, the state is read afresh
                try:
                    return await self._run(name, spec, concurrency=concurrency, checksum=checksum, reload=reload, once=once, wait=wait, known=known)
                except PyMongoError as exc:
                    if not connection_lost(exc):
                        raise
                    await self._ride_out(exc)
        finally:
            await self._stop_asking(name)

    async def _run(
        self,
        name: str,
        spec: Background | None,
        *,
        concurrency: int,
        checksum: str | None,
        reload: Callable[[], Loaded] | None,
        once: bool,
        wait: _FileWait,
        known: State | None = None,
    ) -> State | None:
        capped = False
        self._said.pop(name, None)  # each run says once why it waits
        while not self.engine.cancel.is_set():
            state, known = known or await self.engine.store.state(name), None
            self._outage.ok()
            if state is None:
                return None
            if spec is None or (checksum is not None and state.checksum != checksum):
                if reload is not None:
                    loaded = reload()
                    spec = loaded[0] if loaded is not None else None
                    checksum = loaded[1] if loaded is not None else checksum
                mismatch: Mismatch | None = "missing" if spec is None else "changed" if state.checksum != checksum else None
                if mismatch is not None:
                    if state.status in TERMINAL or state.status == "paused":
                        # failed documents: rolled into the state at a pass's end, on its partitions when a lane failed it
                        left_out = state.status == "failed" and await self.engine.store.bad_id_count(state) > 0
                        _tell_unrunnable(name, state.status, mismatch, left_out=left_out)
                        return state
                    left = wait.still(mismatch, self.engine.now(), state.status)
                    await sleep(max(0.0, min(self.poll_seconds, left)) * 1000, self.engine.cancel)
                    continue
                wait.over()
            assert spec is not None
            # The step starts from the state just read: only the file was looked at since.
            decision = await self.coordinator.step(name, spec, state=state)
            if decision.next == "done":
                if once or not await self._taken_up_again(name, decision.state):
                    return decision.state
                continue
            if decision.held_by and not once:
                # Only a person moves such a requirement on: waiting would hang a CI job (and hold up the
                # migrations after this one); the run reports it blocked, and a later run takes it up.
                return decision.state
            if decision.reason is not None:
                self._waiting(name, decision.reason)
            lanes = max(1, min(concurrency, spec.max_parallel))
            if lanes < concurrency and not capped:  # said once: the operator asked for more lanes than the file allows
                capped = True
                log.info("%s: %s, not %d: the file's max_parallel is %d", name, plural(lanes, "lane"), concurrency, spec.max_parallel)
            if decision.next == "process" and decision.lanes == 0:
                await self._ask(name)  # every lane is held elsewhere: ask for a share of them
            if once:
                if decision.next == "process" and decision.lanes:
                    await asyncio.gather(*(self._lane(name, spec, checksum, once=True, state=decision.state) for _ in range(min(lanes, decision.lanes))))
                    decision = await self.coordinator.step(name, spec)
                return decision.state if decision.next == "done" else await self.engine.store.state(name)
            if decision.next != "process" or decision.lanes == 0:
                await sleep(self.poll_seconds * 1000, self.engine.cancel)
                continue
            slices = self._slices
            await asyncio.gather(*(self._lane(name, spec, checksum, state=decision.state) for _ in range(lanes)))
            if self._slices == slices:  # no lane got a partition: look again after a poll, not at once
                await sleep(self.poll_seconds * 1000, self.engine.cancel)
        return await self.engine.store.state(name)

    async def _taken_up_again(self, name: str, ended: State | None) -> bool:
        """Whether the migration this run saw end (failed, cancelled, paused) was retried or resumed since.

        A control may land between the step that saw the end and the runner's exit: the runner
        then goes on with it, so that what it reports (and its exit status) is the final state of
        what it ran, not a failure someone has already taken up again."""
        if ended is None or ended.status == "completed":
            return False
        fresh = await self.engine.store.state(name)
        if fresh is None or fresh.registration != ended.registration or fresh.status not in LIVE:
            return False
        log.info("%s: %s, then taken up again (%s): running it on", name, ended.status, fresh.status)
        return True

    async def _lane(self, name: str, spec: Background, checksum: str | None, *, once: bool = False, state: State | None = None) -> str:
        """One lane's slices until the migration has no partition left for it (or stops).

        ``state``: the state of the step that started the lane, read a moment before; its first slice
        starts from it, as the slice reads the control fields again before its first batch anyway.
        Every later slice reads the state afresh: by then the migration may have been paused, failed, repinned."""
        lane = Lane(self.engine, f"lane-{secrets.token_hex(4)}")
        errors = 0
        known = state
        # ``once``: the lane's round is one slice's time (``slice_ms``), not one partition: a partition done
        # before then is followed by another, with the time that is left.
        budget_ends = self.engine.now() + spec.slice_ms / 1000
        slice_ms: int | None = None
        while not self.engine.cancel.is_set():
            try:
                state, known = known or await self.engine.store.state(name), None
                if state is None or state.status != "running" or (checksum is not None and state.checksum != checksum):
                    return "stale"
                result = await lane.run_slice(state, spec, slice_ms=slice_ms)
                if result.outcome == "busy":  # every slot is held, or this runner holds its fair share while another waits
                    await self._ask(name)
                    if result.waiting is not None:
                        self._waiting(name, result.waiting)
            except PyMongoError as exc:  # the lane waits the outage out with the rest of this process
                if not connection_lost(exc):
                    raise
                await self._ride_out(exc)
                continue
            self._outage.ok()
            if result.outcome == "busy":
                if once:
                    return result.outcome
                await sleep(self.poll_seconds * 1000, self.engine.cancel)
                continue
            if result.outcome != "exhausted":
                self._slices += 1
            if once:
                left_ms = int((budget_ends - self.engine.now()) * 1000)
                if result.outcome != "done" or left_ms <= 0:
                    return result.outcome
                slice_ms = left_ms  # a partition done with time left in the round: the next one, for what is left
                continue
            if result.outcome in ("yielded", "done"):
                errors = 0
                continue
            if result.outcome == "error":
                errors += 1
                await sleep(min(60_000, 200 * 2**errors), self.engine.cancel)
                continue
            return result.outcome
        return "stopped"

    async def _ride_out(self, exc: PyMongoError) -> None:
        """Wait until a ``ping`` answers (see :mod:`.outage`), or raise ``exc``'s kind past ``reconnect_seconds``."""
        await self._outage.ride_out(exc, lambda: self.engine.db.command("ping"), self.engine.cancel)

    def _waiting(self, name: str, reason: str) -> None:
        """Say why nothing moves yet, once per reason in a row: a run that waits for a killed runner's leases
        to lapse would otherwise sit silent (its progress frozen, its ETA seconds) for up to the lease TTL."""
        if self._said.get(name) != reason:
            self._said[name] = reason
            log.info("%s: waiting: %s", name, reason)

    async def _ask(self, name: str) -> None:
        """Ask for a share of the lanes (see :mod:`.share`), at most twice a poll; the ask outlives a few polls and a lease."""
        now = self.engine.now()
        if self._asked_at is not None and now - self._asked_at < self.poll_seconds / 2:
            return
        self._asked_at = now
        ttl_ms = max(self.engine.lease_ttl_ms, int(3 * self.poll_seconds * 1000))
        await self.engine.store.ask(name, self.engine.runner, ttl_ms=ttl_ms)

    async def _stop_asking(self, name: str) -> None:
        """Withdraw this runner's ask as it leaves, so the others take the free lanes at once; else it lapses."""
        if self._asked_at is None:
            return
        self._asked_at = None
        try:
            await self.engine.store.stop_asking(name, self.engine.runner)
        except PyMongoError as exc:
            log.debug("withdrawing the ask for a lane failed: %s", type(exc).__name__)



@dataclass
class _FileWait:
    """A live migration waiting for this process's copy of its file to be the registered one.

    One clock for both ways the copy can be wrong: a deploy may first remove the old file and then
    bring a version that still differs, and the bound covers the whole wait."""

    name: str
    bound: float
    since: float | None = None
    told: float = 0.0
    why: Mismatch | None = None

    def still(self, why: Mismatch, now: float, status: str) -> float:
        """Note one more poll of the wait; the seconds left, or the error once the bound has passed."""
        if self.since is None:
            self.since = now
        if why != self.why:
            self.why, self.told = why, now
            log.warning("%s: %s: waiting up to %gs for it. %s", self.name, _PROBLEM[why], self.bound, _REMEDY[why].format(name=self.name))
        waited = now - self.since
        if waited >= self.bound:
            raise self._gave_up(why, status)
        if now - self.told >= CHECKSUM_WAIT_LOG_SECONDS:
            self.told = now
            log.warning("%s: still waiting for %s (%.0fs of %gs)", self.name, _AWAITED[why], waited, self.bound)
        return self.bound - waited

    def over(self) -> None:
        if self.since is not None:
            log.info("%s: the file matches the registered version again; running it", self.name)
        self.since, self.why = None, None

    def _gave_up(self, why: Mismatch, status: str) -> MongoshiftError:
        if why == "missing":
            return FileNotFoundMigrationError(
                f"{self.name}: the file of this registered background migration is still missing from the migrations "
                f"folder after {self.bound:g}s, so nothing was run. Deploy it to every runner, or give the migration "
                f"up with 'mongoshift background cancel {self.name}'",
                file=self.name,
                status=status,
            )
        return BackgroundFileChangedError(
            f"{self.name}: the file still differs from the registered version after "
            f"{self.bound:g}s, so nothing was run. Deploy the registered file to every "
            f"runner, or pin this one with 'mongoshift background repin {self.name}'",
            file=self.name,
            status=status,
        )


_PROBLEM: dict[Mismatch, str] = {
    "changed": "the file differs from the registered version (a deploy in progress?)",
    "missing": "the file is not in the migrations folder (a deploy in progress?)",
}
_AWAITED: dict[Mismatch, str] = {"changed": "the file to match the registered version", "missing": "the file to appear"}
_REMEDY: dict[Mismatch, str] = {
    "changed": "'mongoshift background repin {name}' pins the file as it is now",
    "missing": "Deploy the registered file to this runner",
}


def _tell_unrunnable(name: str, status: str, why: Mismatch, *, left_out: bool = False) -> None:
    """What to do about a finished or paused migration whose file changed since it was registered, or is gone.

    ``left_out``: it holds failed documents, which a plain retry leaves out (it would fail again on them): the
    retry to name is ``--from-start``, as the failure's own message says."""
    if why == "missing":
        log.warning(
            "%s is %s and its file is not in the migrations folder; nothing was run. Deploy the registered file%s",
            name, status, "" if status == "completed" else f" before you {'resume' if status == 'paused' else 'retry'} it",
        )
        return
    then = {
        "failed": f"then 'mongoshift background retry {name}{' --from-start' if left_out else ''}'",
        "cancelled": f"then 'mongoshift background retry {name}'",
        "paused": f"then 'mongoshift background resume {name}'",
        "completed": "so that status shows the file as it is",
    }.get(status, "")
    log.warning(
        "%s is %s and its file differs from the registered version; nothing was run. Pin the file as it is now "
        "with 'mongoshift background repin %s' (or deploy the registered file), %s",
        name, status, name, then,
    )
