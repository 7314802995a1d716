"""A batch's fenced checkpoint is in flight while the batch is transformed, and the batch is written only
once the checkpoint says the lane still holds its partition (docs/background.md, "How it runs").

The checkpoint of each batch waits, in the test, until the transform of that batch has begun (a condition,
not a sleep): a lane that checkpoints before it transforms never lets it begin, and the test fails instead
of passing slowly."""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from mongoshift.api import background as bg, migrations as command
from mongoshift.background.lanes import modes
from mongoshift.background.lanes.lane import Lane

from ..conftest import Project
from .conftest import background_file, seed

NAME = "0001_names.py"
PROBE = "mongoshift_checkpoint_overlap_probe"
#: How long a checkpoint waits for its batch's transform before it says it never began: a failure, not a pace.
NEVER_S = 60.0


class Overlap:
    """Counts the batches whose transform began; a checkpoint carrying batch k waits until the k-th began."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.transforms = 0
        self.waited: list[bool] = []
        self.gave_up = False

    def transform_began(self) -> None:
        with self.changed:
            self.transforms += 1
            self.changed.notify_all()

    def wait_for_transform(self, batch: int) -> None:
        with self.changed:
            began = self.changed.wait_for(lambda: self.transforms >= batch, timeout=0 if self.gave_up else NEVER_S)
            self.gave_up = self.gave_up or not began  # one batch waited in vain: the test fails, and need not wait again
            self.waited.append(began)


@pytest.fixture
def overlap() -> Iterator[Overlap]:
    probe = Overlap()
    sys.modules[PROBE] = types.SimpleNamespace(overlap=probe)  # type: ignore[assignment]
    try:
        yield probe
    finally:
        del sys.modules[PROBE]


SOURCE = '''
import mongoshift_checkpoint_overlap_probe as probe

def migrate(doc, ctx):
    if doc["n"] % 100 == 0:  # the first document of each batch of 100
        probe.overlap.transform_began()
    doc["full_name"] = doc.pop("first", "") + " " + doc.pop("last", "")
    return doc

background = Background('''


async def run_slice(project: Project, monkeypatch: pytest.MonkeyPatch, overlap: Overlap, *, fenced_at: int | None = None) -> Any:
    """One slice over the partition; each checkpoint carrying a batch waits for that batch's transform.
    ``fenced_at``: that batch's checkpoint finds the partition taken (answers None, as a fenced-off one does)."""
    import asyncio

    quiet = "adaptive=False, max_replication_lag_ms=False, slice_ms=3_600_000,"
    project.add(NAME, background_file(batch_size=100, extra=quiet).replace("background = Background(", SOURCE))
    settings = project.settings()
    await command.up(settings)
    async with bg.open_engine(settings) as engine:
        spec = engine.spec(NAME)
        state = (await engine.coordinator.step(NAME, spec)).state
        checkpoint = engine.store.checkpoint
        carried = 0

        async def waiting(lease: Any, **kwargs: Any) -> Any:
            nonlocal carried
            if kwargs.get("intent") is None:
                return await checkpoint(lease, **kwargs)
            carried += 1
            await asyncio.to_thread(overlap.wait_for_transform, carried)
            if carried == fenced_at:
                return None
            return await checkpoint(lease, **kwargs)

        monkeypatch.setattr(engine.store, "checkpoint", waiting)
        return await Lane(engine.context, "lane").run_slice(state, spec)


async def test_a_batch_is_transformed_while_its_checkpoint_is_in_flight(
    project: Project, db: AsyncDatabase[Any], monkeypatch: pytest.MonkeyPatch, overlap: Overlap
) -> None:
    await seed(db.people, 500)
    result = await run_slice(project, monkeypatch, overlap)
    assert overlap.waited == [True] * 5 and not overlap.gave_up
    assert result.outcome == "done" and result.counters["migrated"] == 500 and result.counters["scanned"] == 500
    assert await db.people.count_documents({"__v": 2, "full_name": {"$exists": True}}) == 500
    (report,) = await bg.run(project.settings(), [NAME])
    assert report.status == "completed" and report.totals["migrated"] == 500 and report.totals["scanned"] == 500


async def test_a_batch_whose_checkpoint_is_fenced_off_is_not_written(
    project: Project, db: AsyncDatabase[Any], monkeypatch: pytest.MonkeyPatch, overlap: Overlap
) -> None:
    """The transform ran while the checkpoint was in flight; the checkpoint's answer stops the write."""
    await seed(db.people, 500)
    writes = 0
    apply_batch = modes.apply_batch

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal writes
        writes += 1
        return await apply_batch(*args, **kwargs)

    monkeypatch.setattr(modes, "apply_batch", counted)
    result = await run_slice(project, monkeypatch, overlap, fenced_at=3)
    assert result.outcome == "lost" and overlap.waited == [True] * 3
    assert writes == 3  # the third batch was handed to the write path, transformed, and held at its fence
    assert await db.people.count_documents({"__v": 2}) == 200  # two batches written, not the third
