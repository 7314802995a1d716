from __future__ import annotations

from typing import Any

import pytest

BG_FILE = '''
from mongoshift import Background

def migrate(doc, ctx):
    doc["full_name"] = doc.pop("first", "") + " " + doc.pop("last", "")
    return doc

background = Background(
    collection="people",
    from_version=1,
    to_version=2,
    migrate=migrate,
    batch_size={batch_size},
    pause_ms=0,
    max_parallel={max_parallel},
    {extra}
)
'''


def background_file(batch_size: int = 200, max_parallel: int = 1, extra: str = "") -> str:
    return BG_FILE.format(batch_size=batch_size, max_parallel=max_parallel, extra=extra)


async def seed(collection: Any, n: int, *, version: int | None = 1, start: int = 0, batch: int = 1000) -> None:
    docs = []
    for i in range(start, start + n):
        doc: dict[str, Any] = {"_id": i, "first": f"F{i}", "last": f"L{i}", "n": i}
        if version is not None:
            doc["__v"] = version
            doc["__rev"] = 1
        docs.append(doc)
    for k in range(0, len(docs), batch):
        await collection.insert_many(docs[k : k + batch], ordered=False)
    await collection.create_index([("__v", 1), ("_id", 1)])


@pytest.fixture
def fast_project(project):  # type: ignore[no-untyped-def]
    """A project with short background timings, for tests."""
    project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.2)
    return project
