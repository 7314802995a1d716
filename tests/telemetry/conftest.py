"""OpenTelemetry's SDK with in-memory exporters, and pymongo's instrumentation, for the telemetry tests.

pymongo's instrumentation registers one global command listener the first time it is
installed, bound to the tracer provider of that time: so the provider is one per test
process, its exporter cleared for each test, and the listener enabled only during a test
(the clients mongoshift opens in the test are created after it is).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.instrumentation.pymongo import PymongoInstrumentor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mongoshift.telemetry import OpenTelemetry


@dataclass
class Telemetry:
    """What one test recorded: finished spans and metric points, and the observer that records them."""

    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    observer: OpenTelemetry

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if name is None or s.name == name]

    def ours(self) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name.startswith("mongoshift.")]

    def children(self, parent: ReadableSpan) -> list[ReadableSpan]:
        assert parent.context is not None
        return [s for s in self.spans() if s.parent is not None and s.parent.span_id == parent.context.span_id]

    def points(self, name: str) -> list[Any]:
        """Every data point of the metric ``name`` (empty when it recorded nothing)."""
        data = self.reader.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        found.extend(metric.data.data_points)
        return found

    def total(self, name: str) -> int:
        return sum(p.value for p in self.points(name))

    def metric_names(self) -> set[str]:
        data = self.reader.get_metrics_data()
        return {m.name for r in (data.resource_metrics if data else []) for s in r.scope_metrics for m in s.metrics}


@pytest.fixture(scope="session")
def tracer_provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    PymongoInstrumentor().instrument(tracer_provider=provider)
    PymongoInstrumentor().uninstrument()  # enabled by the tests that want it
    yield provider, exporter
    provider.shutdown()


@pytest.fixture
def telemetry(tracer_provider: tuple[TracerProvider, InMemorySpanExporter]) -> Iterator[Telemetry]:
    provider, exporter = tracer_provider
    exporter.clear()
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    PymongoInstrumentor().instrument(tracer_provider=provider)
    try:
        yield Telemetry(exporter, reader, OpenTelemetry(tracer_provider=provider, meter_provider=meters))
    finally:
        PymongoInstrumentor().uninstrument()
        meters.shutdown()
        exporter.clear()
