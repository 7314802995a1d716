"""The OpenTelemetry observer: spans and metrics of mongoshift runs, on the application's providers.

Imported only when the ``opentelemetry`` API is installed (``pip install 'mongoshift[otel]'``).
The providers are the application's (or OpenTelemetry's global ones, which do nothing until
an SDK is configured): mongoshift never configures an exporter itself.

Whatever the tracer or the meter does, a run goes on exactly as without them: each part
is guarded here, the observer as a whole by :class:`~mongoshift.project.events.Events`,
and its scopes by the executor and the engine.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from opentelemetry import metrics, trace

from ..project.events import Event
from . import names
from .metrics import Metrics
from .spans import Spans

log = logging.getLogger("mongoshift.telemetry")


class OpenTelemetry:
    """An observer that turns a run's events into spans and metrics (docs/observability.md).

    ``tracer_provider`` / ``meter_provider``: the application's, else OpenTelemetry's global
    ones. ``db`` is the ``db.namespace`` of every span and point; the API fills it in from
    the settings, on a copy (:meth:`bound`), when the observer is passed to one of its calls.
    Pass one in ``observers=`` to use your own providers; without one, ``mongoshift.api``
    adds one on the global providers.
    """

    def __init__(
        self, *, tracer_provider: trace.TracerProvider | None = None, meter_provider: metrics.MeterProvider | None = None, db: str | None = None
    ) -> None:
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.db = db
        self._spans: Spans | None = None
        self._metrics: Metrics | None = None
        self._started = False

    def bound(self, db: str | None) -> OpenTelemetry:
        """A fresh observer on the same providers, for one call on database ``db`` (kept when already set)."""
        return OpenTelemetry(tracer_provider=self.tracer_provider, meter_provider=self.meter_provider, db=self.db or db)

    def __call__(self, event: Event) -> None:
        self._start()
        for part in (self._spans, self._metrics):
            if part is not None:
                try:
                    part.on(event)
                except Exception:
                    log.exception("OpenTelemetry: recording %s failed (ignored)", event.kind)

    def run_scope(self, event: Event) -> AbstractContextManager[Any]:
        return self._scope(lambda spans: spans.run_scope(event))

    def migration_scope(self, event: Event) -> AbstractContextManager[Any]:
        return self._scope(lambda spans: spans.migration_scope(event))

    def coordinate_scope(self, event: Event) -> AbstractContextManager[Any]:
        return self._scope(lambda spans: spans.coordinate_scope(event))

    def slice_scope(self, event: Event) -> AbstractContextManager[Any]:
        return self._scope(lambda spans: spans.slice_scope(event))

    def _scope(self, make: Callable[[Spans], AbstractContextManager[Any]]) -> AbstractContextManager[Any]:
        self._start()
        return nullcontext() if self._spans is None else make(self._spans)

    def _start(self) -> None:
        """The tracer and the meter, taken on first use; one that cannot be had leaves its part out."""
        if self._started:
            return
        self._started = True
        release = _release()
        attributes = {names.DB_NAMESPACE: self.db} if self.db else {}
        try:
            tracer = trace.get_tracer(names.SCOPE, release, tracer_provider=self.tracer_provider)
            self._spans = Spans(tracer, {**attributes, names.DB_SYSTEM: names.DB_SYSTEM_VALUE})
        except Exception:
            log.exception("OpenTelemetry: no tracer, so no spans (ignored)")
        try:
            # The provider's own get_meter: metrics.get_meter wants a version string, and a bare checkout has none.
            meter = (self.meter_provider or metrics.get_meter_provider()).get_meter(names.SCOPE, release)
            self._metrics = Metrics(meter, attributes)
        except Exception:
            log.exception("OpenTelemetry: no meter, so no metrics (ignored)")



def _release() -> str | None:
    """mongoshift's version, the instrumentation scope's (None when run from a bare checkout)."""
    try:
        return version("mongoshift")
    except PackageNotFoundError:
        return None
