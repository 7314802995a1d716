"""OpenTelemetry spans and metrics for mongoshift, when the ``opentelemetry`` API is installed.

``pip install 'mongoshift[otel]'`` adds the API only; the application configures the SDK
and its exporters. Without the API nothing here imports it, and nothing is recorded:
:func:`with_telemetry` hands the observers back unchanged. ``mongoshift --help`` and the
read-only commands never load this package's OpenTelemetry half (start-up time).

The observer itself is :class:`~mongoshift.telemetry.observer.OpenTelemetry`, also reachable
as ``mongoshift.telemetry.OpenTelemetry`` (loaded on first use).
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from ..project.events import Observer

if TYPE_CHECKING:
    from .observer import OpenTelemetry

__all__ = ["OpenTelemetry", "with_telemetry"]

log = logging.getLogger("mongoshift.telemetry")


def with_telemetry(observers: list[Observer], db: str | None) -> list[Observer]:
    """A writing call's observers with OpenTelemetry: the caller's own :class:`OpenTelemetry`
    bound to ``db``, or else one on the global providers; unchanged without the API."""
    try:
        from .observer import OpenTelemetry
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] != "opentelemetry":  # not its absence: say so, and go on
            log.exception("OpenTelemetry could not be loaded (ignored)")
        return observers  # no opentelemetry-api: no spans, no metrics, no cost
    except Exception:  # a broken installation is no reason for a run not to happen
        log.exception("OpenTelemetry could not be loaded (ignored)")
        return observers
    try:
        if any(isinstance(o, OpenTelemetry) for o in observers):
            return [o.bound(db) if isinstance(o, OpenTelemetry) else o for o in observers]
        return [*observers, OpenTelemetry(db=db)]
    except Exception:  # never a reason for a run not to happen
        log.exception("OpenTelemetry could not be set up (ignored)")
        return observers


def __getattr__(name: str) -> Any:
    if name == "OpenTelemetry":
        try:
            return importlib.import_module(".observer", __name__).OpenTelemetry
        except ModuleNotFoundError as exc:  # the extra: a clear message instead of a bare "No module named 'opentelemetry'"
            if (exc.name or "").partition(".")[0] != "opentelemetry":
                raise
            raise ModuleNotFoundError("mongoshift.telemetry.OpenTelemetry needs the OpenTelemetry API: pip install 'mongoshift[otel]'", name=exc.name) from exc
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
