"""docs/observability.md: its examples run as written, and its OpenTelemetry table lists every instrument."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from mongoshift.telemetry import names

from .test_api_doc import BLOCK

DOC = Path(__file__).resolve().parents[2] / "docs" / "observability.md"


def _run(tmp_path: Path, mongo_uri: str, db_name: str, ending: str) -> str:
    scripts = [body for kind, body in BLOCK.findall(DOC.read_text(encoding="utf-8")) if kind == "python" and ending in body]
    assert len(scripts) == 1
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MONGOSHIFT_", "OTEL_"))}
    env.update(MONGOSHIFT_URI=mongo_uri, MONGOSHIFT_DB=db_name, PYTHONWARNINGS="error::DeprecationWarning")
    result = subprocess.run([sys.executable, "-c", scripts[0]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_example_runs_as_written(tmp_path: Path, mongo_uri: str, db_name: str) -> None:
    out = _run(tmp_path, mongo_uri, db_name, "asyncio.run(main())")
    assert "0001_plans.py: backfilled plans {'matched': 2}" in out


def test_the_opentelemetry_example_runs_and_prints_what_the_doc_says(tmp_path: Path, mongo_uri: str, db_name: str) -> None:
    out = _run(tmp_path, mongo_uri, db_name, "asyncio.run(otel_main())")
    text = DOC.read_text(encoding="utf-8")
    printed = text[text.index("It prints the driver's spans") :].split("```console\n", 1)[1].split("```", 1)[0]
    assert out == printed


def test_the_metrics_table_lists_every_instrument_with_its_kind_unit_and_attributes() -> None:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("### Metrics") : text.index("### A tracer that fails")]
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([a-z_.]+)` \|.*$", section, re.MULTILINE)}
    assert sorted(rows) == sorted(spec.name for spec in names.INSTRUMENTS)
    for spec in names.INSTRUMENTS:
        cells = [cell.strip() for cell in rows[spec.name].strip("|").split("|")]
        assert (cells[1], cells[2]) == (spec.kind, f"`{spec.unit}`"), spec.name
        listed = set(re.findall(r"`([a-z_.]+)`", cells[3]))
        assert listed == {names.DB_NAMESPACE, *spec.attributes}, spec.name


def test_the_spans_table_names_every_span() -> None:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("### Spans") : text.index("### Metrics")]
    spans = re.findall(r"^\| `(mongoshift\.[a-z_.]+)` \|", section, re.MULTILINE)
    assert spans == [names.RUN_SPAN, names.MIGRATION_SPAN, names.CONVERGE_SPAN, names.COORDINATE_SPAN, names.SLICE_SPAN]
