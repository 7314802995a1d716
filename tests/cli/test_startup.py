"""Start-up time: ``mongoshift --help`` and ``status`` load only what they use (issue 11, bench/cli.py).

Checked in a fresh interpreter, since this test process has long imported everything.
A module-level import of the API, the driver, rich or pydantic anywhere under
``mongoshift.cli`` (or in ``mongoshift/__init__.py``) fails the first test.
"""

from __future__ import annotations

import json
import subprocess
import sys

#: Never loaded by ``import mongoshift.cli.main`` (which every command and --help pays for).
HEAVY_FOR_HELP = (
    "mongoshift.background", "mongoshift.converge", "mongoshift.api", "mongoshift.line", "mongoshift.telemetry", "rich", "pydantic", "pymongo",
    "opentelemetry",
)
#: Never loaded by the API module behind ``status``, ``list`` and ``lock``.
HEAVY_FOR_STATUS = (
    "mongoshift.background", "mongoshift.converge", "mongoshift.line.executor", "mongoshift.schema.background", "mongoshift.telemetry", "rich",
    "opentelemetry",  # installed in the tests (the otel extra): only a writing call loads it
)


def _loaded_after(statement: str) -> list[str]:
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def _heavy(modules: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)]


def test_the_cli_module_loads_no_engine_converge_driver_rich_or_pydantic() -> None:
    modules = _loaded_after("import mongoshift.cli.main")
    assert "click" in modules  # the check itself works: what the CLI needs is there
    assert _heavy(modules, HEAVY_FOR_HELP) == []


def test_the_status_path_loads_no_engine_or_converge() -> None:
    modules = _loaded_after("import mongoshift.cli.main, mongoshift.api.migrations")
    assert "pymongo" in modules
    assert _heavy(modules, HEAVY_FOR_STATUS) == []


def test_the_lazy_packages_still_give_every_public_name() -> None:
    code = "import mongoshift, mongoshift.api as api; [getattr(m, n) for m in (mongoshift, api) for n in m.__all__]"
    subprocess.run([sys.executable, "-c", code], check=True)
