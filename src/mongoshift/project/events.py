"""Events: one type and one observer protocol for the migration line and the background engine.

An :class:`Event` says what happened (``kind``), to which migration (None for the run as a
whole) and in which run (``run_id``), with small ``data`` (counts, names, durations, never a
document or an ``_id``; a migration log's own ``data`` is the author's choice). Observers are
plain functions called synchronously, in order; one that raises is logged and ignored, so
watching a run can never change its outcome.

Line kinds: ``run_start`` / ``run_end``, ``migration_start`` / ``migration_end``,
``migration_retry`` (a transaction's body run again after a transient error),
``lock_acquired``, ``lock_waited``, ``lock_refused``, ``lock_lost``, ``converge_start`` /
``converge_end``, and ``log`` (``ctx.log``). Every ``*_end`` carries ``duration_ms`` and
``outcome``, and ``error_kind`` (the exit-code kind) when it failed.

The seam for tracers: an observer may also have ``run_scope(event)``, entered around a
writing command from its ``run_start`` to its ``run_end`` (connecting, checks, lock and
closing included), and ``migration_scope(event)``, which returns a
context manager; the executor enters it around each migration body (sync bodies run in a
worker thread that inherits the context), so whatever it makes current, such as an
OpenTelemetry span, is current for the body. The background engine offers the same seam
around its units of work: ``coordinate_scope(event)`` around a coordinator step (an event
of kind ``coordinate``, never emitted) and ``slice_scope(event)`` around a lane's slice,
from its ``slice_start`` to its ``slice_end``. A scope that raises on enter or exit is
logged and skipped, like an observer.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..errors import MongoshiftError, RunAbortedError
from .redaction import describe_error, redact

log = logging.getLogger("mongoshift.events")


@dataclass(frozen=True)
class Event:
    kind: str
    migration: str | None
    data: dict[str, Any] = field(default_factory=dict)
    run_id: str | None = None


Observer = Callable[[Event], None]


class Events:
    """Fans events out to observers; an observer that raises is logged and ignored.

    Thread-safe: a sync migration's ``ctx.log`` emits from its worker thread, and observers
    are called one event at a time.
    """

    def __init__(self, observers: Iterable[Observer] = (), *, run_id: str | None = None) -> None:
        self.observers = list(observers)
        self.run_id = run_id
        self._lock = threading.RLock()  # an observer may itself emit (a tracer logging through ctx.log)

    def emit(self, kind: str, migration: str | None, /, **data: Any) -> Event:
        event = Event(kind, migration, data, self.run_id)
        self.log(event)
        with self._lock:
            for observer in self.observers:
                try:
                    observer(event)
                except Exception as exc:
                    _observer_failed(exc, "an event observer failed (ignored)")
        return event

    def log(self, event: Event) -> None:
        """The event as a log line: DEBUG on ``mongoshift.events``, with its fields in ``extra``
        (not a ``log`` event: ``ctx.log`` writes its own line on the migration's logger)."""
        if event.kind != "log" and log.isEnabledFor(logging.DEBUG):
            details = " ".join(f"{k}={v}" for k, v in event.data.items() if k != "data")
            log.debug(
                "%s %s %s",
                event.kind,
                event.migration or "",
                details,
                extra={"event": event.kind, "run_id": event.run_id, "migration": event.migration, "data": event.data},
            )

    def run_scope(self, event: Event) -> AbstractContextManager[None]:
        """Every observer's ``run_scope``, entered around a writing command (``event``: its ``run_start``)."""
        return self.scope("run_scope", event)

    def migration_scope(self, event: Event) -> AbstractContextManager[None]:
        """Every observer's ``migration_scope``, entered around one body; a failing one is skipped."""
        return self.scope("migration_scope", event)

    def coordinate_scope(self, event: Event) -> AbstractContextManager[None]:
        """Every observer's ``coordinate_scope``, entered around one coordinator step."""
        return self.scope("coordinate_scope", event)

    def slice_scope(self, event: Event) -> AbstractContextManager[None]:
        """Every observer's ``slice_scope``, entered around one lane's slice (``event``: its ``slice_start``)."""
        return self.scope("slice_scope", event)

    @contextmanager
    def scope(self, hook: str, event: Event) -> Iterator[None]:
        """The ``hook`` method of every observer that has one, entered in order; a failing one is skipped."""
        with ExitStack() as stack:
            for observer in self.observers:
                enter = getattr(observer, hook, None)
                if callable(enter):
                    stack.enter_context(_guarded(enter, hook, event))
            yield


def end_fields(started: float, failure: BaseException | None, *, outcome: str = "success") -> dict[str, Any]:
    """The fields every ``*_end`` event shares: ``duration_ms`` since ``started`` (monotonic),
    ``outcome`` (``failed`` on a failure), ``error_kind`` (the exit-code kind) and ``error``
    (redacted, as every stored error) of a failure."""
    data: dict[str, Any] = {"duration_ms": int((time.monotonic() - started) * 1000), "outcome": outcome}
    if failure is not None:
        data["outcome"] = "failed"
        if isinstance(failure, MongoshiftError):
            data["error_kind"], data["error"] = failure.kind, redact(failure.message)
        elif isinstance(failure, asyncio.CancelledError):  # the task awaiting the call was cancelled: a stop, not a bug
            data["error_kind"], data["error"] = RunAbortedError.kind, "the task running it was cancelled"
        else:
            data["error_kind"], data["error"] = "unexpected", describe_error(failure)
    return data


def _observer_failed(exc: BaseException, said: str) -> None:
    """An observer's failure, logged with its own traceback only, redacted: an event emitted while a
    migration's error is handled would chain that error (its message, a URI's password) to it, and
    whatever handler the application configured would print it as it is."""
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, chain=False))
    log.error("%s: %s", said, redact(trace.rstrip(), limit=20_000))


@contextmanager
def _guarded(enter: Callable[[Event], AbstractContextManager[Any]], hook: str, event: Event) -> Iterator[None]:
    """One observer's scope; its failures are logged, never raised, and never swallow the body's
    (what its ``__exit__`` returns is ignored: a scope cannot hide a failure)."""
    try:
        scope = enter(event)
        scope.__enter__()
    except Exception as exc:
        _observer_failed(exc, f"an event observer's {hook} failed to enter (ignored)")
        yield
        return
    try:
        yield
    except BaseException as exc:
        try:
            scope.__exit__(type(exc), exc, exc.__traceback__)
        except Exception as failed:
            _observer_failed(failed, f"an event observer's {hook} failed to exit (ignored)")
        raise
    else:
        try:
            scope.__exit__(None, None, None)
        except Exception as failed:
            _observer_failed(failed, f"an event observer's {hook} failed to exit (ignored)")
