"""A tracer or a meter that raises never skips or repeats a migration, on the line or in the engine."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mongoshift import api
from mongoshift.telemetry import OpenTelemetry

from ..background.conftest import seed


class Broken(RuntimeError):
    """What every part of a broken telemetry SDK raises."""


class _Raises:
    """Any method called on it raises."""

    def __getattr__(self, name: str) -> Any:
        def fail(*args: Any, **kwargs: Any) -> Any:
            raise Broken(f"{type(self).__name__}.{name}")

        return fail


class RaisingTracer(_Raises):
    pass


class RaisingSpan(_Raises):
    pass


class SpansThatRaise:
    """A tracer that starts spans, every method of which raises (attributes, events, status, end)."""

    def start_span(self, *args: Any, **kwargs: Any) -> RaisingSpan:
        return RaisingSpan()


class RaisingInstrument(_Raises):
    pass


class InstrumentsThatRaise:
    """A meter whose histograms and counters raise when they record."""

    def create_histogram(self, *args: Any, **kwargs: Any) -> RaisingInstrument:
        return RaisingInstrument()

    def create_counter(self, *args: Any, **kwargs: Any) -> RaisingInstrument:
        return RaisingInstrument()


class Provider:
    """A tracer or meter provider handing out ``made`` (or raising, when ``made`` is None)."""

    def __init__(self, made: Any = None) -> None:
        self.made = made

    def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
        if self.made is None:
            raise Broken("get_tracer")
        return self.made

    def get_meter(self, *args: Any, **kwargs: Any) -> Any:
        if self.made is None:
            raise Broken("get_meter")
        return self.made


COUNTS = """
{prefix}def up(ctx):
    {wait}ctx.db.runs.update_one({{"_id": "{name}"}}, {{"$inc": {{"times": 1}}}}, upsert=True)
"""

BACKGROUND = '''
from mongoshift import Background

def migrate(doc, ctx):
    doc["times"] = doc.get("times", 0) + 1
    return doc

background = Background(collection="people", from_version=1, to_version=2, migrate=migrate, batch_size=10, pause_ms=0)
'''


def _use_span_raising_on_enter(*args: Any, **kwargs: Any) -> Any:
    raise Broken("use_span")


@contextmanager
def _use_span_raising_on_exit(*args: Any, **kwargs: Any) -> Iterator[None]:
    yield
    raise Broken("use_span exit")


def _real_tracer() -> Any:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    return provider


BROKEN = {
    "no tracer, no meter": lambda: OpenTelemetry(tracer_provider=Provider(), meter_provider=Provider()),
    "tracer that cannot start a span": lambda: OpenTelemetry(tracer_provider=Provider(RaisingTracer()), meter_provider=Provider(RaisingTracer())),
    "spans and instruments that raise": lambda: OpenTelemetry(tracer_provider=Provider(SpansThatRaise()), meter_provider=Provider(InstrumentsThatRaise())),
    "a scope that raises on enter": lambda: OpenTelemetry(tracer_provider=_real_tracer()),
    "a scope that raises on exit": lambda: OpenTelemetry(tracer_provider=_real_tracer()),
}


@pytest.mark.parametrize("broken", list(BROKEN))
async def test_each_migration_runs_exactly_once_whatever_the_telemetry_does(project, db, monkeypatch, broken: str) -> None:  # type: ignore[no-untyped-def]
    if broken == "a scope that raises on enter":
        monkeypatch.setattr("opentelemetry.trace.use_span", _use_span_raising_on_enter)
    elif broken == "a scope that raises on exit":
        monkeypatch.setattr("opentelemetry.trace.use_span", _use_span_raising_on_exit)
    project.write_config(background_inline=True, background_lease_ttl_seconds=2, background_poll_seconds=0.2)
    project.add("0001_async.py", COUNTS.format(prefix="async ", wait="await ", name="0001"))
    project.add("0002_sync.py", COUNTS.format(prefix="", wait="", name="0002"))
    project.add("0003_background.py", BACKGROUND)
    project.add("0004_async.py", COUNTS.format(prefix="async ", wait="await ", name="0004"))
    await seed(db.people, 30)

    report = await api.up(project.settings(), observers=[BROKEN[broken]()])

    assert [(r.name, r.status) for r in report.results] == [
        ("0001_async.py", "applied"), ("0002_sync.py", "applied"), ("0003_background.py", "applied"), ("0004_async.py", "applied"),
    ]
    assert {d["_id"]: d["times"] async for d in db.runs.find()} == {"0001": 1, "0002": 1, "0004": 1}
    assert [d async for d in await db.people.aggregate([{"$group": {"_id": {"v": "$__v", "times": "$times"}, "n": {"$sum": 1}}}])] == [
        {"_id": {"v": 2, "times": 1}, "n": 30}
    ]
    assert await db["_mongoshift_migrations"].count_documents({"status": "applied"}) == 4
