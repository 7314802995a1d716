"""A runner's outcome is the final state of what it ran (issue 24, item 19).

A migration can end (failed, paused) and be taken up again by an operator (``retry``,
``resume``) between the coordinator step that saw the end and the runner's exit: the runner
goes on with it, so that it does not report a failure, or an unfinished run, that is not the
migration's state any more.
"""

from __future__ import annotations

from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from mongoshift.api import background as bg, migrations as command
from mongoshift.background.lanes.coordinator import Coordinator, Decision
from mongoshift.background.state.controls import Action, control
from mongoshift.background.state.store import BackgroundStore
from mongoshift.cli.background import run_verdict
from mongoshift.schema.background import Background

from ..conftest import Project
from .conftest import background_file, seed

NAME = "0001_names.py"
POISONED = "def migrate(doc, ctx):\n    if doc.get('poison'):\n        raise ValueError('poisoned')"


@pytest.mark.parametrize(("ends", "action"), [("failed", "retry"), ("paused", "resume")])
async def test_a_migration_taken_up_again_as_the_runner_saw_it_end_is_run_to_its_end(
    fast_project: Project, db: AsyncDatabase[Any], monkeypatch: pytest.MonkeyPatch, ends: str, action: Action
) -> None:
    await seed(db.people, 300)
    await db.people.update_one({"_id": 150}, {"$set": {"poison": True}})
    fast_project.add(NAME, background_file(batch_size=50, extra="max_document_errors=0,").replace("def migrate(doc, ctx):", POISONED))
    settings = fast_project.settings()
    await command.up(settings)
    store = BackgroundStore(db)
    if ends == "paused":
        await db.people.update_one({"_id": 150}, {"$unset": {"poison": ""}})
        await control(store, NAME, "pause", by="operator")
    step = Coordinator.step
    taken_up: list[str] = []

    async def step_then_taken_up(self: Coordinator, name: str, spec: Background, **kwargs: Any) -> Decision:
        """The operator's control lands right after the step that saw the migration end."""
        decision = await step(self, name, spec, **kwargs)
        if decision.next == "done" and decision.state is not None and decision.state.status == ends and not taken_up:
            await db.people.update_one({"_id": 150}, {"$unset": {"poison": ""}})  # the cause is fixed
            taken_up.append((await control(store, NAME, action, by="operator", from_start=action == "retry")).status)
        return decision

    monkeypatch.setattr(Coordinator, "step", step_then_taken_up)
    (report,) = await bg.run(settings, [NAME])
    assert taken_up == ["pending"]
    assert report.status == "completed" and report.last_error is None
    assert await db.people.count_documents({"__v": 2}) == 300
    assert run_verdict([report]) is None  # exit 0, not 32 (failed) nor 11 (stopped before the end)


async def test_a_failure_nobody_took_up_again_is_still_the_runners_outcome(fast_project: Project, db: AsyncDatabase[Any]) -> None:
    await seed(db.people, 100)
    await db.people.update_one({"_id": 50}, {"$set": {"poison": True}})
    fast_project.add(NAME, background_file(batch_size=50, extra="max_document_errors=0,").replace("def migrate(doc, ctx):", POISONED))
    settings = fast_project.settings()
    await command.up(settings)
    (report,) = await bg.run(settings, [NAME])
    assert report.status == "failed"
    verdict = run_verdict([report])
    assert verdict is not None and verdict.exit_code == 32


BATCH_FAILS = """
def migrate_batch(docs, ctx):
    if any(doc.get('poison') for doc in docs):
        return []  # the wrong number of results: the slice fails
    return [migrate(doc, ctx) for doc in docs]
"""


async def test_a_retry_made_while_the_pass_closes_is_not_failed_again(
    fast_project: Project, db: AsyncDatabase[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The coordinator closing the pass finds a failed partition; meanwhile a lane fails the
    migration and the operator retries it: the coordinator's verdict, made on the state before
    the retry, must not fail it a second time."""
    await seed(db.people, 100)
    await db.people.update_one({"_id": 50}, {"$set": {"poison": True}})
    source = background_file(batch_size=50).replace("background = Background(", BATCH_FAILS + "\nbackground = Background(")
    fast_project.add(NAME, source.replace("migrate=migrate,", "migrate_batch=migrate_batch, max_slice_failures=1,"))
    settings = fast_project.settings()
    await command.up(settings)
    store = BackgroundStore(db)
    failed_partitions = BackgroundStore.failed_partitions
    retried: list[str] = []

    async def failed_then_retried(self: BackgroundStore, state: Any) -> Any:
        found = await failed_partitions(self, state)
        if found[0] and not retried:
            await store.transition(NAME, allowed=("running",), to="failed", action="fail", reason="by a lane")
            await db.people.update_one({"_id": 50}, {"$unset": {"poison": ""}})
            retried.append((await control(store, NAME, "retry", by="operator", from_start=True)).status)
        return found

    monkeypatch.setattr(BackgroundStore, "failed_partitions", failed_then_retried)
    (report,) = await bg.run(settings, [NAME])
    assert retried == ["pending"]
    state = await store.state(NAME)
    assert state is not None and [h["action"] for h in state.history].count("fail") == 1
    assert report.status == "completed" and await db.people.count_documents({"__v": 2}) == 100
