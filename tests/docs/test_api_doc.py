"""docs/api.md, run as written: every example is a whole script, in order, on one project.

Blocks whose first line is ``# file: PATH`` are the project's files; every other
Python block that ends with ``asyncio.run(main())`` is run as a script in the
project folder, the way a user would run it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
BLOCK = re.compile(r"```(python|toml)\n(.*?)```", re.DOTALL)


def blocks() -> tuple[dict[str, str], list[str]]:
    files: dict[str, str] = {}
    scripts: list[str] = []
    for _, body in BLOCK.findall(DOC.read_text(encoding="utf-8")):
        first = body.splitlines()[0]
        if first.startswith("# file: "):
            files[first.removeprefix("# file: ").strip()] = body
        elif "asyncio.run(main())" in body:
            scripts.append(body)
    return files, scripts


def test_the_doc_has_an_example_for_every_call() -> None:
    from mongoshift import api

    _, scripts = blocks()
    text = "\n".join(scripts)
    calls = [name for name in api.__all__ if name[0].islower() and callable(getattr(api, name))]
    missing = [name for name in calls if f"api.{name}(" not in text and f"mongoshift.{name}(" not in text and name not in ("rows_to_json",)]
    assert not missing, f"docs/api.md has no runnable example of {missing}"


def test_the_doc_has_an_example_for_every_call_of_a_session() -> None:
    from mongoshift.api.session import Background, Collections, Intents, Mongoshift

    _, scripts = blocks()
    text = "\n".join(scripts)
    groups = {"ms.": Mongoshift, "ms.collections.": Collections, "ms.background.": Background, "ms.intents.": Intents}
    calls = [prefix + name for prefix, cls in groups.items() for name in vars(cls) if not name.startswith("_") and callable(getattr(cls, name))]
    missing = [call for call in calls if f"{call}(" not in text]
    assert not missing, f"docs/api.md has no runnable example of {missing}"


def test_the_doc_names_no_removed_keyword() -> None:
    """``no_lock=`` / ``wait=`` / ``yes=`` were the flat functions' spellings of ``lock=Lock(...)`` and ``confirm=``."""
    text = re.sub(r"Lock\([^)]*\)", "Lock()", DOC.read_text(encoding="utf-8"))  # Lock(wait=...) is the new spelling
    assert re.findall(r"\b(?:no_lock|yes|wait)=", text) == []


#: Runs the examples given as a JSON list, in order, each as ``python -c`` would (a fresh ``__main__``), in one
#: process: a process per example cost a second of start-up each. Exits 1 at the first that raises, naming it.
RUNNER = """
import json, sys, traceback
for index, script in enumerate(json.load(open(sys.argv[1], encoding="utf-8"))):
    try:
        exec(compile(script, f"<example {index + 1}>", "exec"), {"__name__": "__main__"})
    except BaseException:
        sys.stderr.write(f"example {index + 1} of docs/api.md failed:\\n{script}\\n{traceback.format_exc()}")
        sys.exit(1)
"""


def test_every_example_runs_as_written(tmp_path: Path, mongo_uri: str, db_name: str, sync_client) -> None:  # type: ignore[no-untyped-def]
    files, scripts = blocks()
    for name, body in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body, encoding="utf-8")
    examples = tmp_path / "examples.json"
    examples.write_text(json.dumps(scripts), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOSHIFT_")}
    env.update(MONGOSHIFT_URI=mongo_uri, MONGOSHIFT_DB=db_name, PYTHONWARNINGS="error::DeprecationWarning")
    try:
        result = subprocess.run(
            [sys.executable, "-c", RUNNER, str(examples)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120 * len(scripts)
        )
        assert result.returncode == 0, result.stderr
    finally:
        sync_client.drop_database(db_name)


def test_no_module_of_the_api_shadows_a_function_of_the_same_name() -> None:
    """``mongoshift.api`` loads its names lazily; a submodule named like one of them would, once
    imported (by the session, say), replace the function on the package with the module."""
    import importlib
    import pkgutil

    import mongoshift.api as api

    for info in pkgutil.iter_modules(api.__path__):
        importlib.import_module(f"mongoshift.api.{info.name}")
    for name in api.__all__:
        value = getattr(api, name)
        assert not isinstance(value, type(api)), f"mongoshift.api.{name} is a module, not the API's {name}"
