"""How the API attaches OpenTelemetry: on the global providers by itself, on the caller's when given, never without the API.

The global providers can be set once per process, and the absence of the package is a
property of a process: both run in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from mongoshift.telemetry import OpenTelemetry, with_telemetry

MIGRATION = "async def up(ctx):\n    await ctx.db.items.insert_one({'n': 1})\n"

BLOCKER = """
import importlib.abc, sys

class NoOpenTelemetry(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoOpenTelemetry())
"""

WITHOUT = """
import asyncio, json, sys
from mongoshift import api
import mongoshift.telemetry

async def main():
    settings = api.load_settings({"migrations_dir": sys.argv[1]})
    report = await api.up(settings, observers=[lambda event: None])
    await api.run_background(settings)
    try:
        mongoshift.telemetry.OpenTelemetry
        named = True
    except ImportError as exc:
        named = str(exc)
    loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
    print(json.dumps({"statuses": [r.status for r in report.results], "loaded": loaded, "named": named}))

asyncio.run(main())
"""

GLOBAL = """
import asyncio, json, sys
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from mongoshift import api

exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

def names():
    data = reader.get_metrics_data()
    return sorted({m.name for r in (data.resource_metrics if data else []) for s in r.scope_metrics for m in s.metrics})

async def main():
    settings = api.load_settings({"migrations_dir": sys.argv[1]})
    await api.status(settings)
    await api.dry_run(settings, "up")
    await api.audit(settings)
    quiet = {"spans": [s.name for s in exporter.get_finished_spans()], "metrics": names()}
    with trace.get_tracer("app").start_as_current_span("app.startup") as startup:
        await api.up(settings)
    spans = {s.name: s for s in exporter.get_finished_spans()}
    run = spans["mongoshift.run"]
    print(json.dumps({
        "quiet": quiet,
        "spans": sorted(spans),
        "run_parent_is_the_app_span": run.parent is not None and run.parent.span_id == startup.get_span_context().span_id,
        "db": run.attributes["db.namespace"],
        "metrics": names(),
    }))

asyncio.run(main())
"""


def _run(script: str, tmp_path: Path, mongo_uri: str, db_name: str) -> tuple[dict, str]:  # type: ignore[type-arg]
    """What the script printed last (JSON), and its stderr."""
    folder = tmp_path / "migrations"
    folder.mkdir()
    (folder / "0001_items.py").write_text(MIGRATION)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MONGOSHIFT_", "OTEL_"))}
    env.update(MONGOSHIFT_URI=mongo_uri, MONGOSHIFT_DB=db_name)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), str(folder)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_without_the_opentelemetry_package_nothing_imports_it_and_runs_go_on(tmp_path: Path, mongo_uri: str, db_name: str) -> None:
    found, stderr = _run(BLOCKER + WITHOUT, tmp_path, mongo_uri, db_name)
    # An application that names the observer is told which extra to install, not "No module named 'opentelemetry'".
    named = "mongoshift.telemetry.OpenTelemetry needs the OpenTelemetry API: pip install 'mongoshift[otel]'"
    assert found == {"statuses": ["applied"], "loaded": [], "named": named}
    assert "opentelemetry" not in stderr.lower() and "Traceback" not in stderr  # not an error: nothing to say


READ_ONLY = """
import asyncio, json, sys
from mongoshift import api

async def main():
    settings = api.load_settings({"migrations_dir": sys.argv[1]})
    await api.status(settings)
    dry = await api.dry_run(settings, "up", observers=[lambda event: None])
    await api.audit(settings)
    loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry" or m.startswith("mongoshift.telemetry"))
    print(json.dumps({"would_run": [row.name for row in dry.rows], "loaded": loaded}))

asyncio.run(main())
"""


def test_the_read_only_calls_and_a_dry_run_never_load_opentelemetry(tmp_path: Path, mongo_uri: str, db_name: str) -> None:
    """It is installed here: only a writing call loads it (a dry run records nothing, and paid its import)."""
    found, _ = _run(READ_ONLY, tmp_path, mongo_uri, db_name)
    assert found == {"would_run": ["0001_items.py"], "loaded": []}


def test_without_an_observer_of_the_caller_the_api_records_on_the_global_providers_and_only_for_writing_calls(
    tmp_path: Path, mongo_uri: str, db_name: str
) -> None:
    found, _ = _run(GLOBAL, tmp_path, mongo_uri, db_name)
    assert found["quiet"] == {"spans": [], "metrics": []}  # status, dry run, audit: nothing
    assert found["spans"] == ["app.startup", "mongoshift.migration", "mongoshift.run"]
    assert found["run_parent_is_the_app_span"] and found["db"] == db_name
    assert {"mongoshift.run.duration", "mongoshift.migration.duration", "mongoshift.lock.acquire.duration"} <= set(found["metrics"])


def test_the_callers_own_observer_is_bound_to_the_database_and_none_is_added() -> None:
    mine = OpenTelemetry(tracer_provider=object(), meter_provider=object())
    other = print
    attached = with_telemetry([other, mine], "app")
    assert len(attached) == 2 and attached[0] is other
    bound = attached[1]
    assert isinstance(bound, OpenTelemetry) and bound is not mine  # a fresh one per call: no state shared between runs
    assert (bound.db, bound.tracer_provider, bound.meter_provider) == ("app", mine.tracer_provider, mine.meter_provider)
    assert mine.db is None
    [added] = with_telemetry([], "app")
    assert isinstance(added, OpenTelemetry) and added.db == "app" and added.tracer_provider is None
