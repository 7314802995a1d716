"""One coordinator step and one lane slice per call (api.coordinate_background, api.run_background_slice):
the unit a job system's tasks run, driven here by hand to the end."""

from __future__ import annotations

import pytest

from mongoshift import api
from mongoshift.errors import NotAppliedError

from .conftest import background_file, seed

NAME = "0001_names.py"


async def test_steps_and_slices_drive_a_migration_to_its_end(fast_project, db, client) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 300)
    fast_project.add(NAME, background_file(batch_size=50, max_parallel=2, extra="partitions={'min_partition_docs': 50}, slice_ms=1000,"))
    settings = fast_project.settings()
    await api.up(settings, client=client)
    outcomes: list[str] = []
    for _ in range(200):
        step = await api.coordinate_background(settings, "0001_names", client=client)
        if step.next == "done":
            break
        assert step.next == "process" and 0 <= step.lanes <= 2, step
        for _ in range(step.lanes):
            piece = await api.run_background_slice(settings, NAME, client=client)
            outcomes.append(piece.outcome)
            assert piece.error is None
    assert (step.next, step.status) == ("done", "completed")
    assert await db.people.count_documents({"__v": 2, "__rev": 2}) == 300  # each document rewritten once
    assert "done" in outcomes or "yielded" in outcomes
    after = await api.run_background_slice(settings, NAME, client=client)
    assert (after.outcome, after.status) == ("stale", "completed")  # nothing to do once it completed


async def test_a_changed_file_makes_the_step_wait_and_the_slice_stale(fast_project, db, client) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 20)
    fast_project.add(NAME, background_file(batch_size=50))
    settings = fast_project.settings()
    await api.up(settings, client=client)
    fast_project.add(NAME, background_file(batch_size=50) + "\n# deployed half-way\n")
    step = await api.coordinate_background(settings, NAME, client=client)
    assert (step.next, step.lanes) == ("wait", 0) and "differs from the registered version" in (step.reason or "")
    assert (await api.run_background_slice(settings, NAME, client=client)).outcome == "stale"
    assert await db.people.count_documents({"__v": 2}) == 0  # the wrong code never ran
    with pytest.raises(NotAppliedError):
        await api.coordinate_background(settings, "0009_unknown", client=client)
