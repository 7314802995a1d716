"""docs/odm.md runs as written: its Beanie and MongoEngine blocks are extracted and run against the
server, with the application's shapes module taken from docs/versioning.md, as the blocks import it."""

from __future__ import annotations

import ast
import asyncio
import re
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("beanie", reason="Beanie is not installed (pip install 'mongoshift[beanie]')")
mongoengine = pytest.importorskip("mongoengine", reason="MongoEngine is not installed (pip install 'mongoshift[mongoengine]')")

DOCS = Path(__file__).resolve().parents[2] / "docs"


def python_blocks(name: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / name).read_text(encoding="utf-8"), re.S)


@pytest.fixture
def myapp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``myapp.shapes`` as docs/versioning.md writes it, importable as the blocks expect."""
    [shapes] = [b for b in python_blocks("versioning.md") if b.startswith("# myapp/shapes.py\n")]
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "shapes.py").write_text(shapes)
    monkeypatch.syspath_prepend(str(tmp_path))
    for module in [m for m in sys.modules if m == "myapp" or m.startswith("myapp.")]:
        monkeypatch.delitem(sys.modules, module)


def test_the_doc_has_the_blocks_this_test_runs() -> None:
    beanie, engine = python_blocks("odm.md")
    assert "from mongoshift.versioning.beanie import VersionedDocument" in beanie
    assert "from mongoshift.versioning.mongoengine import VersionedDocument" in engine


async def test_the_beanie_block_runs(myapp: None, client: Any) -> None:
    beanie, _ = python_blocks("odm.md")
    await client.drop_database("myapp")
    try:
        namespace: dict[str, Any] = {"client": client}
        result = eval(compile(beanie, "odm.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT), namespace)
        if result is not None:
            await result
        person = namespace["person"]
        assert await client.myapp.people.find_one({}, {"_id": 0}) == {"__v": 2, "__rev": 1, "first": "Ada"}
        await namespace["rename"](person.id, "Lovelace")
        assert await client.myapp.people.find_one({}, {"_id": 0}) == {"__v": 2, "__rev": 2, "first": "Ada", "last": "Lovelace"}
    finally:
        await client.drop_database("myapp")


async def test_the_mongoengine_block_runs(myapp: None, mongo_uri: str, sync_client: Any) -> None:
    """The block named ``PEOPLE`` without importing it, and used MongoEngine without connecting: a NameError
    on the class, then no connection, when run as written."""
    _, engine = python_blocks("odm.md")
    sync_client.drop_database("myapp")
    namespace: dict[str, Any] = {"uri": mongo_uri}
    try:
        # MongoEngine blocks: run in a worker thread, as an async application would
        await asyncio.to_thread(exec, compile(engine, "odm.md", "exec"), namespace)
        person = namespace["person"]
        assert sync_client.myapp.people.find_one({}, {"_id": 0}) == {"__v": 2, "__rev": 1, "first": "Ada"}
        await asyncio.to_thread(namespace["rename"], person.pk, "Lovelace")
        assert sync_client.myapp.people.find_one({}, {"_id": 0}) == {"__v": 2, "__rev": 2, "first": "Ada", "last": "Lovelace"}
    finally:
        mongoengine.disconnect(alias="default")
        if "Person" in namespace:
            namespace["Person"]._collection = None
        sync_client.drop_database("myapp")
