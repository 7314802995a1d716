"""Spans from events: a run, its migrations and converge, and the background engine's units of work.

``mongoshift.run`` opens at ``run_start`` (a child of whatever span is current in the
caller) and closes at ``run_end``, current in between through ``run_scope`` so that the
driver's spans of the run's set-up and tear-down nest under it; ``mongoshift.lock`` says
whether the run took the lock, skipped it, or was refused it (absent when it stopped before
trying, as against an unreachable server). ``mongoshift.migration`` and
``mongoshift.converge`` are its children. The migration span is made *current* around the body through
``migration_scope``, so that the driver's own spans (pymongo's instrumentation) nest under
it, in a plain ``def`` body too (its thread inherits the context). The coordinate and
slice spans live exactly as long as their scope, current for the engine's requests.

A failure sets status ERROR with the redacted message and ``error.type`` (the exit-code
kind). No exception is recorded on a span: its text and traceback are not redacted.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from ..errors import MongoshiftError
from ..project.events import Event
from ..project.redaction import describe_error, redact
from . import names

#: At most this much of a failure's (already redacted) message goes on a span.
MESSAGE_LIMIT = 1024

#: Engine events kept as span events on the coordinate or slice span they happen in.
SPAN_EVENTS = frozenset({"unblocked", "partitioned", "pass", "completed", "failed", "reclaimed", "lease_lost", "throttle"})

#: Slice outcomes that are failures, with their ``error.type``.
SLICE_FAILURES = {"error": "background_failed", "failed": "background_failed", "lost": "lock_lost", "disconnected": "connection_failed"}

#: ``slice_end`` counters set on the slice span, under :data:`.names.SLICE_COUNT_PREFIX`.
SLICE_COUNTS = ("scanned", "migrated", "skipped", "conflicts", "failed", "retried", "batches", "txn_retries")


class Spans:
    """The spans of the runs one observer sees; ``attributes`` go on every span."""

    def __init__(self, tracer: Tracer, attributes: Mapping[str, Any]) -> None:
        self.tracer = tracer
        self.attributes = dict(attributes)
        self._runs: dict[str | None, Span] = {}
        self._migrations: dict[tuple[str | None, str | None], Span] = {}
        self._converges: dict[str | None, Span] = {}
        #: The coordinate or slice span of the task at hand: engine events inside it become its span events.
        self._unit: ContextVar[Span | None] = ContextVar("mongoshift_telemetry_unit", default=None)

    def on(self, event: Event) -> None:
        kind, data, run = event.kind, event.data, event.run_id
        if kind == "run_start":
            lock = names.LOCK_AT_START.get(str(data.get("lock")))  # taken or refused: set by its lock event, when it happens
            self._runs[run] = self._start(names.RUN_SPAN, event, None, {names.COMMAND: data.get("command"), names.LOCK: lock})
        elif kind == "run_end":
            span = self._runs.pop(run, None)
            if span is not None:
                _finish(span, data)
        elif kind.startswith("lock_"):
            span = self._runs.get(run)
            if span is not None:
                span.add_event(kind, _plain(data))
                if kind in names.LOCK_OUTCOMES:
                    span.set_attribute(names.LOCK, names.LOCK_OUTCOMES[kind])
        elif kind == "migration_start":
            attributes = {
                names.MIGRATION: event.migration,
                names.DIRECTION: data.get("direction"),
                names.BATCH: data.get("batch"),
                names.KIND: data.get("kind"),
            }
            self._migrations[(run, event.migration)] = self._start(names.MIGRATION_SPAN, event, self._runs.get(run), attributes)
        elif kind == "migration_retry":
            span = self._migrations.get((run, event.migration))
            if span is not None:
                span.add_event("retry", {names.ATTEMPT: data.get("attempt", 0)})
        elif kind == "migration_end":
            span = self._migrations.pop((run, event.migration), None)
            if span is not None:
                _finish(span, data)
        elif kind == "converge_start":
            attributes = {names.TRIGGER: data.get("trigger"), names.PRUNE: data.get("prune")}
            self._converges[run] = self._start(names.CONVERGE_SPAN, event, self._runs.get(run), attributes)
        elif kind == "converge_end":
            span = self._converges.pop(run, None)
            if span is not None:
                if "actions" in data:
                    span.set_attribute(names.ACTIONS, data["actions"])
                _finish(span, data)
        elif kind == "slice_end":
            self._slice_end(data)
        elif kind in SPAN_EVENTS:
            unit = self._unit.get()
            if unit is not None:
                unit.add_event(kind, _plain(data))

    def run_scope(self, event: Event) -> AbstractContextManager[Any]:
        """The run span, current from ``run_start`` to ``run_end`` (set-up and tear-down included); ended by ``run_end``."""
        span = self._runs.get(event.run_id)
        if span is None:
            return nullcontext()
        return trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False)

    def migration_scope(self, event: Event) -> AbstractContextManager[Any]:
        """The migration span, current around the body; ended by ``migration_end``, not here."""
        span = self._migrations.get((event.run_id, event.migration))
        if span is None:
            return nullcontext()
        return trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False)

    def coordinate_scope(self, event: Event) -> AbstractContextManager[Any]:
        return self._unit_scope(names.COORDINATE_SPAN, event, {})

    def slice_scope(self, event: Event) -> AbstractContextManager[Any]:
        data = event.data
        attributes = {names.PARTITION: data.get("partition"), names.LANE: data.get("lane"), names.SLOT: data.get("slot")}
        return self._unit_scope(names.SLICE_SPAN, event, attributes)

    @contextmanager
    def _unit_scope(self, name: str, event: Event, attributes: dict[str, Any]) -> Iterator[None]:
        """A span as long as the scope and current inside it; an exception through it is its failure."""
        span = self._start(name, event, None, {names.MIGRATION: event.migration, **attributes})
        token = self._unit.set(span)
        try:
            with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
                yield
        except Exception as exc:
            if isinstance(exc, MongoshiftError):
                _fail(span, exc.kind, exc.message)
            else:
                _fail(span, "unexpected", describe_error(exc))
            raise
        finally:  # a cancelled task (the runner stopping) is no failure
            self._unit.reset(token)
            span.end()

    def _slice_end(self, data: Mapping[str, Any]) -> None:
        span = self._unit.get()
        if span is None:
            return
        outcome = data.get("outcome")
        span.set_attribute(names.OUTCOME, str(outcome))
        for key in SLICE_COUNTS:  # a count the slice's mode does not keep (txn_retries of a plain slice) is 0
            count = data.get(key, 0)
            if isinstance(count, int):
                span.set_attribute(names.SLICE_COUNT_PREFIX + key, count)
        if outcome in SLICE_FAILURES:
            _fail(span, SLICE_FAILURES[str(outcome)], str(data.get("error") or f"the slice ended {outcome}"))

    def _start(self, name: str, event: Event, parent: Span | None, attributes: Mapping[str, Any]) -> Span:
        """A span (a child of ``parent``, else of the current span) with the shared attributes."""
        context = trace.set_span_in_context(parent) if parent is not None else None
        span = self.tracer.start_span(name, context=context, kind=SpanKind.INTERNAL)
        values = {**self.attributes, names.RUN_ID: event.run_id, **attributes}
        span.set_attributes({key: value for key, value in values.items() if value is not None})
        return span


def _finish(span: Span, data: Mapping[str, Any]) -> None:
    """End a span with an ``*_end`` event's fields: its outcome, and on a failure its status."""
    if "outcome" in data:
        span.set_attribute(names.OUTCOME, str(data["outcome"]))
    if data.get("outcome") == "failed":
        _fail(span, str(data.get("error_kind") or "unexpected"), str(data.get("error") or ""))
    span.end()


def _fail(span: Span, kind: str, message: str) -> None:
    span.set_attribute(names.ERROR_TYPE, kind)
    span.set_status(Status(StatusCode.ERROR, redact(message, limit=MESSAGE_LIMIT)))


def _plain(data: Mapping[str, Any]) -> dict[str, Any]:
    """An event's data as span event attributes: only the scalar values (an attribute cannot hold a mapping)."""
    return {key: value for key, value in data.items() if isinstance(value, (str, bool, int, float))}
