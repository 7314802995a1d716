"""The blocking twins of the versioning helpers are generated (tools/synchro.py), never hand-kept."""

from __future__ import annotations

from ..scripts import load_script


def _tool():  # type: ignore[no-untyped-def]
    return load_script("tools/synchro.py")


def test_every_committed_twin_is_what_the_tool_generates() -> None:
    tool = _tool()
    for source, (twin, docstring) in tool.TWINS.items():
        assert twin.read_text(encoding="utf-8") == tool.synchronous(source.read_text(encoding="utf-8"), docstring), (
            f"{twin.name} is out of date: run python tools/synchro.py"
        )
    assert tool.main(["--check"]) == 0


def test_the_twin_has_the_sync_io_and_names() -> None:
    tool = _tool()
    source = (
        '"""doc"""\nfrom pymongo.asynchronous.collection import AsyncCollection\n\n\n'
        'async def put(c: AsyncCollection) -> None:\n    """Like :func:`put`."""\n    await c.insert_one({})\n    return await _explain(c)\n\n\n'
        "async def _explain(c: AsyncCollection) -> None:\n    await c.find_one({})\n"
    )
    twin = tool.synchronous(source, "twin")
    assert twin.startswith('"""twin\n"""')
    assert "def put_sync(c: Collection)" in twin and ":func:`put_sync`" in twin
    assert "from pymongo.collection import Collection" in twin
    assert "def _explain(c: Collection)" in twin and "return _explain(c)" in twin
    assert "async" not in twin and "await" not in twin and "Async" not in twin
