"""Health signals: waiting before a batch while the cluster is busy.

A background migration rewrites every document of a collection while the
application runs, and on a replica set all of that is replicated. A secondary
that falls behind serves stale reads and, if it is elected, loses the writes it
had not caught up with; majority writes of the application slow down too. So
before each batch the engine asks its health signals how long to wait
(:func:`wait_while_unhealthy`). :class:`ReplicationLag` is the built-in one; a
user adds their own with :class:`CallableSignal` (for example a function that
reads the application's own latency).

What the server allows is found by trying, never from ``hello``: when
``replSetGetStatus`` fails as "no replication here" (standalone, mongos) the
lag signal turns itself off quietly; when it fails as Unauthorized it warns
once and turns itself off. A missing signal never blocks a migration.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from bson.timestamp import Timestamp

from ...project.server_errors import not_a_replica_set, unauthorized
from ...project.user_code import call

log = logging.getLogger("mongoshift.background")

AdminCommand = Callable[[dict[str, Any]], Awaitable[Mapping[str, Any]]]

PRIMARY, SECONDARY = 1, 2

_CHUNK_S = 0.1  # how often a wait looks at cancellation


@runtime_checkable
class HealthSignal(Protocol):
    """One source of "the cluster is busy, wait"."""

    async def wait_ms(self) -> float:
        """0 = go on; > 0 = wait that long, then ask again."""
        ...


class ReplicationLag:
    """Wait while a secondary lags the primary by more than ``max_lag_ms``.

    ``admin_command`` runs a command on the ``admin`` database (``client.admin.command``).
    ``replSetGetStatus`` is read at most every ``refresh_s`` (the lag is cached in
    between); ``replSetGetConfig``, which says which members are hidden or delayed
    (left out), at most every ``config_refresh_s``; if it cannot be read, no one is
    left out. Only members in state SECONDARY count. ``max_lag_ms`` ``None`` or
    ``False`` turns the signal off without asking the server.
    """

    name = "replication_lag"
    #: the wait asked for while a secondary lags: short, so a caught-up secondary is noticed soon.
    wait_step_ms = 1000.0

    def __init__(
        self,
        admin_command: AdminCommand,
        *,
        max_lag_ms: int | float | None = 10_000,
        refresh_s: float = 5.0,
        config_refresh_s: float = 60.0,
        now: Callable[[], float] = time.monotonic,
        logger: logging.Logger = log,
    ) -> None:
        self._command = admin_command
        off = max_lag_ms is None or max_lag_ms is False
        self.max_lag_ms: float | None = None if max_lag_ms is None or max_lag_ms is False else float(max_lag_ms)
        self.refresh_s = refresh_s
        self.config_refresh_s = config_refresh_s
        self._now = now
        self._log = logger
        #: False once the server said it cannot answer (or ``max_lag_ms`` is off): never asked again.
        self.enabled = not off
        #: the largest lag of a counted secondary at the last read; None: unknown or no secondary.
        self.last_lag_ms: float | None = None
        #: the name (host:port) of that secondary.
        self.lagging_member: str | None = None
        self._read_at: float | None = None
        self._config_at: float | None = None
        self._excluded: frozenset[Any] = frozenset()

    async def wait_ms(self) -> float:
        if not self.enabled:
            return 0.0
        now = self._now()
        if self._read_at is None or now - self._read_at >= self.refresh_s:
            self._read_at = now
            await self._refresh(now)
        lag, limit = self.last_lag_ms, self.max_lag_ms
        if self.enabled and lag is not None and limit is not None and lag > limit:
            return self.wait_step_ms
        return 0.0

    async def _refresh(self, now: float) -> None:
        try:
            status = await self._run({"replSetGetStatus": 1})
        except Exception as exc:
            self.last_lag_ms, self.lagging_member = None, None
            self._failed(exc)
            return
        if self._config_at is None or now - self._config_at >= self.config_refresh_s:
            self._config_at = now
            self._excluded = await self._read_excluded()
        self.last_lag_ms, self.lagging_member = max_secondary_lag(status, exclude=self._excluded)

    async def _read_excluded(self) -> frozenset[Any]:
        try:
            reply = await self._run({"replSetGetConfig": 1})
        except Exception as exc:
            self._log.debug("replSetGetConfig failed, hidden and delayed members are not left out: %s", _message(exc))
            return frozenset()
        config = reply.get("config")
        return excluded_members(config) if isinstance(config, Mapping) else frozenset()

    async def _run(self, command: dict[str, Any]) -> Mapping[str, Any]:
        reply = await self._command(command)
        if not reply.get("ok", 1):  # a raw reply rather than an exception
            raise _CommandFailed(reply)
        return reply

    def _failed(self, exc: Exception) -> None:
        message = _message(exc)
        if unauthorized(exc):  # not allowed: warn once, stop watching
            self.enabled = False
            self._log.warning(
                "replication lag is not watched: not authorized to run replSetGetStatus "
                "(grant the clusterMonitor role to watch it): %s",
                message,
            )
        elif not_a_replica_set(exc, message):
            self.enabled = False
            self._log.debug("replication lag is not watched: not a replica set (%s)", message)
        else:
            self._log.debug("replSetGetStatus failed, not waiting for now: %s", message)


class CallableSignal:
    """A user's function as a signal: it returns the ms to wait (``None``, ``0``, ``False``: go on).

    The function takes no argument and may be sync (run in a worker thread, so a
    blocking call in it never stalls the loop) or async. ``True`` means
    "busy": wait ``busy_ms``. A function that raises, or returns something else,
    counts as "go on" (warned once, then logged at debug): a broken signal must
    neither stop nor block the migration.
    """

    def __init__(
        self,
        function: Callable[[], Any],
        *,
        name: str | None = None,
        busy_ms: float = 1000.0,
        logger: logging.Logger = log,
    ) -> None:
        self.function = function
        self.name = name or getattr(function, "__name__", repr(function))
        self.busy_ms = busy_ms
        self._log = logger
        self._warned = False

    async def wait_ms(self) -> float:
        try:
            return _as_wait(await call(self.function), self.busy_ms)  # a sync one in a thread: it may block
        except Exception:
            if self._warned:
                self._log.debug("health signal %s failed; not waiting", self.name, exc_info=True)
            else:
                self._warned = True
                self._log.warning("health signal %s failed; not waiting for it", self.name, exc_info=True)
            return 0.0


async def wait_while_unhealthy(
    signals: Sequence[HealthSignal],
    *,
    cancelled: Callable[[], bool],
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    max_wait_s: float | None = None,
) -> float:
    """Wait until every signal says 0, ``cancelled()`` is true or ``max_wait_s`` is spent.

    Each round asks every signal and sleeps the largest wait, in short chunks so
    a cancellation is noticed. Returns the total time waited, in ms.
    """
    waited = 0.0
    limit = None if max_wait_s is None else max_wait_s * 1000
    while not cancelled():
        wait = 0.0
        for signal in signals:
            wait = max(wait, await signal.wait_ms())
        if limit is not None:
            wait = min(wait, limit - waited)
        if not wait > 0:
            break
        while wait > 0 and not cancelled():
            chunk = min(wait, _CHUNK_S * 1000)
            await sleep(chunk / 1000)
            wait -= chunk
            waited += chunk
    return waited


def max_secondary_lag(status: Mapping[str, Any], *, exclude: frozenset[Any] = frozenset()) -> tuple[float | None, str | None]:
    """The largest lag (ms) of a SECONDARY in a ``replSetGetStatus`` reply, and that member's name.

    Lag = the primary's optime - the member's (without a primary: the newest
    secondary's). Members whose ``_id`` is in ``exclude`` are left out.
    ``(None, None)`` when there is no secondary to measure.
    """
    members = [m for m in status.get("members") or () if isinstance(m, Mapping)]
    primary = [t for m in members if _state(m) == PRIMARY and (t := _optime_ms(m)) is not None]
    secondaries = [(m, t) for m in members if _state(m) == SECONDARY and (t := _optime_ms(m)) is not None]
    if not secondaries:
        return None, None
    reference = max(primary) if primary else max(t for _, t in secondaries)
    counted = [(max(0.0, reference - t), m.get("name")) for m, t in secondaries if m.get("_id") not in exclude]
    if not counted:
        return None, None
    lag, name = max(counted, key=lambda item: item[0])
    return lag, name


def excluded_members(config: Mapping[str, Any]) -> frozenset[Any]:
    """The ``_id`` of hidden and delayed members in a ``replSetGetConfig`` ``config`` document."""
    excluded = set()
    for member in config.get("members") or ():
        delay = member.get("secondaryDelaySecs", member.get("slaveDelay", 0))
        if member.get("hidden") or (isinstance(delay, (int, float)) and delay > 0):
            excluded.add(member.get("_id"))
    return frozenset(excluded)


class _CommandFailed(Exception):
    """A reply with ``ok: 0`` from an ``admin_command`` that returns rather than raises."""

    def __init__(self, reply: Mapping[str, Any]) -> None:
        super().__init__(str(reply.get("errmsg", "command failed")))
        self.code = reply.get("code")
        self.details = dict(reply)


def _message(exc: BaseException) -> str:
    details = getattr(exc, "details", None)
    errmsg = details.get("errmsg") if isinstance(details, Mapping) else None
    return str(errmsg or exc)


def _state(member: Mapping[str, Any]) -> int | None:
    state = member.get("state")
    if isinstance(state, int):
        return state
    return {"PRIMARY": PRIMARY, "SECONDARY": SECONDARY}.get(str(member.get("stateStr")))


def _optime_ms(member: Mapping[str, Any]) -> float | None:
    value = member.get("optimeDate")
    if isinstance(value, datetime):
        if value.tzinfo is None:  # pymongo's default: naive UTC
            value = value.replace(tzinfo=UTC)
        return value.timestamp() * 1000
    optime = member.get("optime")
    ts = optime.get("ts") if isinstance(optime, Mapping) else None
    return ts.time * 1000.0 if isinstance(ts, Timestamp) else None


def _as_wait(value: Any, busy_ms: float) -> float:
    if value is None or value is False:
        return 0.0
    if value is True:
        return busy_ms
    if not isinstance(value, (int, float)):
        raise TypeError(f"a health signal returns a number of ms, not {type(value).__name__}")
    return float(value) if math.isfinite(value) and value > 0 else 0.0
