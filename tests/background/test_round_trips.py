"""A lane's steady-state batch costs its read, its write and ONE bookkeeping round trip: the fenced
checkpoint, whose answer also says whether a control changed the migration (issue 11).

Counted with pymongo's command monitoring on the lane's own client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from pymongo import AsyncMongoClient, monitoring
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import AutoReconnect

from mongoshift.api import background as bg, migrations as command
from mongoshift.background.lanes.lane import Lane
from mongoshift.background.state.controls import Action, control
from mongoshift.background.state.store import BackgroundStore

from ..conftest import TEST_CLIENT_OPTIONS, Project
from .conftest import background_file, seed

NAME = "0001_names.py"
#: The driver's own traffic (connection checks, session ends), not the engine's.
DRIVER = frozenset({"hello", "ismaster", "isMaster", "ping", "endSessions", "killCursors"})


class Commands(monitoring.CommandListener):
    """Every command the engine sends, as (command name, collection or database)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name not in DRIVER:
            target = event.command.get(event.command_name)
            self.sent.append((event.command_name, target if isinstance(target, str) else event.database_name))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def batches(sent: list[tuple[str, str]], collection: str) -> list[list[tuple[str, str]]]:
    """The commands from each batch read of ``collection`` to the next one (what came before the first is the slice's start)."""
    starts = [i for i, (name, target) in enumerate(sent) if name == "find" and target == collection]
    return [sent[start:end] for start, end in zip(starts, [*starts[1:], len(sent)], strict=True)]


def bookkeeping(batch: list[tuple[str, str]], collection: str) -> list[tuple[str, str]]:
    return [c for c in batch if c[1] != collection]


Monitored = tuple[AsyncMongoClient[Any], Commands]


@pytest.fixture
def monitored_project(project: Project) -> Project:
    """A long lease TTL: no heartbeat renewal falls between two batches of a test."""
    project.write_config(background_lease_ttl_seconds=30, background_poll_seconds=0.2)
    return project


@pytest.fixture
async def monitored(mongo_uri: str) -> AsyncIterator[Monitored]:
    commands = Commands()
    client: AsyncMongoClient[Any] = AsyncMongoClient(mongo_uri, event_listeners=[commands], **TEST_CLIENT_OPTIONS)
    try:
        yield client, commands
    finally:
        await client.close()


# The replication-lag signal reads the server every 5 s, not per batch: off, so that a slow
# machine cannot put one of its reads between two batches.
QUIET = "adaptive=False, max_replication_lag_ms=False,"


@pytest.mark.parametrize("transform", ["migrate", "pipeline"])
async def test_a_steady_state_batch_is_a_read_a_write_and_one_checkpoint(
    monitored_project: Project, db: AsyncDatabase[Any], monitored: Monitored, transform: str
) -> None:
    client, commands = monitored
    await seed(db.people, 900)
    # One slice long enough for the six batches however loaded the machine (the server evaluates pipelines slowly).
    # Batches of 150: over mongod's first batch of 101, so a read that named no batchSize would take a getMore too.
    source = background_file(batch_size=150, extra=QUIET + " slice_ms=3_600_000,")
    if transform == "pipeline":
        source = source.replace("migrate=migrate,", "pipeline=[{'$set': {'full_name': {'$concat': ['$first', ' ', '$last']}}}, {'$unset': ['first', 'last']}],")
    monitored_project.add(NAME, source)
    settings = monitored_project.settings()
    await command.up(settings)
    async with bg.open_engine(settings, client=client) as engine:
        spec = engine.spec(NAME)
        state = (await engine.coordinator.step(NAME, spec)).state
        # A lane adds to the throughput samples once per 10 s of work: a loaded machine could pass that
        # within the six batches, so here only the slice's end does (its one update, asserted below).
        engine.context.sample_seconds = float("inf")
        commands.sent.clear()
        result = await Lane(engine.context, "counted").run_slice(state, spec)
    assert result.outcome == "done" and result.counters["migrated"] == 900
    assert await db.people.count_documents({"__v": 2, "full_name": {"$exists": True}}) == 900

    sample = ("update", "_mongoshift_background")
    checkpoint = ("findAndModify", "_mongoshift_background_partitions")
    if transform == "migrate":
        # Unpaced (pause_ms=0), a lane reads the next batch while the current one is written, so the
        # reads come early and their order against the write is the event loop's: what is fixed is one
        # read, one write and one checkpoint a batch, each batch's checkpoint (recording it in flight)
        # before its write, and its write before the next batch's checkpoint.
        sent = commands.sent[commands.sent.index(("find", "people")):]  # the slice's start (claim, control read) before it
        # six full batches, then the read that finds the partition empty, whose checkpoint closes the
        # partition; then the slice's throughput sample (one update of the state), and nothing else.
        assert sorted(sent) == sorted([("find", "people")] * 7 + [("update", "people")] * 6 + [checkpoint] * 7 + [sample]), sent
        assert sent[-2:] == [checkpoint, sample]
        checkpoints = [i for i, c in enumerate(sent) if c == checkpoint]
        writes = [i for i, c in enumerate(sent) if c == ("update", "people")]
        reads = [i for i, c in enumerate(sent) if c == ("find", "people")]
        assert all(checkpoints[k] < writes[k] < checkpoints[k + 1] for k in range(6)), sent
        assert all(reads[k] < checkpoints[k] for k in range(7)), sent
        return
    read = batches(commands.sent, "people")
    assert len(read) == 7  # six full batches, then the read that finds the partition empty
    for batch in read[:-1]:
        assert [c for c in batch if c[1] == "people"] == [("find", "people"), ("update", "people")], batch
        # A range: its checkpoint commits with its update, in one transaction (docs/background.md).
        assert bookkeeping(batch, "people") == [checkpoint, ("commitTransaction", "admin")], batch
    # The last read finds nothing: its checkpoint closes the partition, then the slice's throughput
    # sample (one update of the state), and nothing else is sent (a pipeline's last range, the rest
    # of the partition, is empty: its update matches nothing).
    assert read[-1] == [("find", "people"), ("update", "people"), checkpoint, ("commitTransaction", "admin"), sample]


async def slice_with_a_change_at_checkpoint(
    project: Project, db: AsyncDatabase[Any], monitored: Monitored, monkeypatch: pytest.MonkeyPatch,
    *, documents: int, at: int, change: Callable[[], Awaitable[Any]], observers: list[Any] | None = None, revert: bool = False,
) -> Any:
    """One lane's slice over ``documents`` in batches of 100; ``change`` runs (as an operator on
    another connection would) just before the ``at``-th checkpoint is written (``revert``: the file has one)."""
    client, commands = monitored
    await seed(db.people, documents)
    project.add(NAME, background_file(batch_size=100, extra=QUIET + (" revert=migrate," if revert else "")))
    settings = project.settings()
    await command.up(settings)
    async with bg.open_engine(settings, client=client, observers=observers or ()) as engine:
        spec = engine.spec(NAME)
        state = (await engine.coordinator.step(NAME, spec)).state
        store = engine.store
        checkpoint = store.checkpoint
        calls = 0

        async def changed_midway(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == at:
                await change()
            return await checkpoint(*args, **kwargs)

        monkeypatch.setattr(store, "checkpoint", changed_midway)
        commands.sent.clear()
        return await Lane(engine.context, "changed").run_slice(state, spec)


@pytest.mark.parametrize(("action", "outcome"), [("pause", "paused"), ("cancel", "cancelled")])
async def test_a_control_made_during_a_batch_stops_the_lane_before_the_next(
    monitored_project: Project, db: AsyncDatabase[Any], monitored: Monitored, monkeypatch: pytest.MonkeyPatch, action: Action, outcome: str
) -> None:
    """The control lands while the third batch is written, before its checkpoint: the lane reads it
    back with that checkpoint and runs no fourth batch, though it no longer reads the state per batch."""
    result = await slice_with_a_change_at_checkpoint(
        monitored_project, db, monitored, monkeypatch, documents=1000, at=3,
        change=lambda: control(BackgroundStore(db), NAME, action, by="operator"),
    )
    assert result.outcome == outcome
    assert result.counters["batches"] == 3 and result.counters["migrated"] == 300
    assert await db.people.count_documents({"__v": 2}) == 300
    # One state read at the start of the slice, one after the stamped checkpoint; none in between.
    assert monitored[1].sent.count(("find", "_mongoshift_background")) == 2


async def test_a_stamp_without_a_halting_change_costs_one_read_and_the_lane_goes_on(
    monitored_project: Project, db: AsyncDatabase[Any], monitored: Monitored, monkeypatch: pytest.MonkeyPatch
) -> None:
    # say, a repin that changes no setting a pass depends on
    result = await slice_with_a_change_at_checkpoint(
        monitored_project, db, monitored, monkeypatch, documents=500, at=2,
        change=lambda: BackgroundStore(db).stamp_control(NAME),
    )
    assert result.outcome == "done" and result.counters["migrated"] == 500
    assert monitored[1].sent.count(("find", "_mongoshift_background")) == 2


async def test_a_control_whose_stamp_fails_is_still_made_and_says_so(
    monitored_project: Project, db: AsyncDatabase[Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The state moved: the control is made; its lanes read the state again at their next slice at the latest."""
    await seed(db.people, 10)
    monitored_project.add(NAME, background_file(batch_size=100, extra=QUIET))
    await command.up(monitored_project.settings())
    store = BackgroundStore(db)

    async def unreachable(name: str) -> None:
        raise AutoReconnect("connection closed")

    monkeypatch.setattr(store, "stamp_control", unreachable)
    result = await control(store, NAME, "pause", by="operator")
    assert result.applied == "applied" and result.status == "paused"
    state = await store.state(NAME)
    assert state is not None and state.status == "paused"
    assert "pause is done, but its lanes may notice it only at their next slice: AutoReconnect" in caplog.text


async def test_a_lease_lost_to_a_new_registration_says_so(
    monitored_project: Project, db: AsyncDatabase[Any], monitored: Monitored, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``down`` registers the revert while a lane works: its next checkpoint finds its partition gone. The event says the
    migration was registered anew, not that the lease lapsed or another runner took it."""
    from mongoshift.background.state.events import _SENTENCES

    seen: list[Any] = []
    result = await slice_with_a_change_at_checkpoint(
        monitored_project, db, monitored, monkeypatch, documents=500, at=2,
        change=lambda: command.down(monitored_project.settings()),
        observers=[seen.append],
        revert=True,
    )
    assert result.outcome == "lost"
    (lost,) = [e for e in seen if e.kind == "lease_lost"]
    assert lost.data["registered_anew"] is True and "registered anew" in _SENTENCES["lease_lost"](lost.data)


def around_the_batches(sent: list[tuple[str, str]], collection: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """What a run sends before its first batch read of ``collection``, and after its last write of it."""
    first = sent.index(("find", collection))
    last = max(i for i, c in enumerate(sent) if c == ("update", collection))
    return sent[:first], sent[last + 1 :]


STATES, PARTITIONS, LOCKS = "_mongoshift_background", "_mongoshift_background_partitions", "_mongoshift_locks"


async def test_a_one_partition_run_sends_a_fixed_few_commands_around_its_batches(
    monitored_project: Project, db: AsyncDatabase[Any], monitored: Monitored
) -> None:
    """``background run`` of one migration with one partition on one lane: what it sends before its first batch read
    (connect checks, plan, start, claim) and after its last write (close the partition, the pass, the run) is pinned
    command by command, so that a state read or a count added back on either side shows here (stop 54, issue 27)."""
    client, commands = monitored
    await seed(db.people, 300)
    monitored_project.add(NAME, background_file(batch_size=100, extra=QUIET))
    settings = monitored_project.settings()
    await command.up(settings)
    commands.sent.clear()
    (report,) = await bg.run(settings, [NAME], client=client)
    assert report.status == "completed" and report.totals["migrated"] == 300
    before, after = around_the_batches(commands.sent, "people")
    database = db.name
    assert before == [
        # the session's check of the own collections (one listing, one sample of each that exists)
        ("listCollections", database), ("find", STATES), ("find", PARTITIONS), ("find", LOCKS), ("find", "_mongoshift_migrations"),
        ("createIndexes", STATES), ("createIndexes", PARTITIONS),
        ("find", STATES),  # the name is a registered migration; the runner's and the coordinator's first look too
        ("update", LOCKS), ("find", STATES),  # the coordinator's lock, and the state read under it
        ("aggregate", "people"), ("aggregate", "people"),  # the plan: its bracket counts, the versions that are no number
        ("insert", PARTITIONS), ("findAndModify", STATES), ("delete", PARTITIONS),  # adopted, older plans deleted
        ("findAndModify", STATES),  # started (no lane holds a partition of a plan just adopted: nothing to stamp)
        ("aggregate", PARTITIONS), ("aggregate", PARTITIONS),  # open partitions, live leases
        ("delete", LOCKS),
        # the lane's slice: reap, fair share, claim, the version index, the control fields before its first batch
        ("aggregate", PARTITIONS), ("aggregate", STATES), ("findAndModify", PARTITIONS), ("listIndexes", "people"), ("find", STATES),
    ], before
    assert after == [
        ("findAndModify", PARTITIONS), ("update", STATES),  # the checkpoint closing the partition, the throughput sample
        # the lane's next slice finds nothing to claim
        ("find", STATES), ("aggregate", PARTITIONS), ("aggregate", STATES), ("findAndModify", PARTITIONS), ("find", PARTITIONS),
        # the runner's next step: no open partition, so under the lock: count again, close the pass
        ("find", STATES), ("aggregate", PARTITIONS), ("update", LOCKS), ("find", STATES),
        ("aggregate", PARTITIONS), ("aggregate", PARTITIONS),  # reap, open partitions
        ("aggregate", PARTITIONS), ("find", PARTITIONS), ("findAndModify", STATES),  # failed partitions; the roll-up
        ("aggregate", "people"),  # what is left to migrate
        ("findAndModify", STATES), ("update", PARTITIONS),  # completed, and its stamp
        ("find", STATES),  # the migrations blocked on it
        ("delete", LOCKS),
        ("find", PARTITIONS),  # the report's partitions
    ], after
    assert (len(before), len(after)) == (24, 22)
