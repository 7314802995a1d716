"""An unpaced lane reads its next batch while the current one is transformed and written (docs/background.md,
"Throughput"): the server answers that read while the client transforms, instead of idling.

The read is seen with pymongo's command monitoring on the lane's own client; the transform waits on it
(an event, not a sleep), so a lane that does not read ahead fails the test instead of passing it slowly."""

from __future__ import annotations

import asyncio
import sys
import threading
import types
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from bson.codec_options import CodecOptions
from pymongo import AsyncMongoClient, monitoring
from pymongo.asynchronous.database import AsyncDatabase

from mongoshift.api import background as bg, migrations as command
from mongoshift.background.lanes.lane import Lane
from mongoshift.background.lanes.modes import READ_AHEAD_TASK, _Ahead, _lent, _Read
from mongoshift.background.state.model import Checkpoint
from mongoshift.background.write.batch import Lent

from ..conftest import TEST_CLIENT_OPTIONS, Project, fail_command
from .conftest import background_file, seed

NAME = "0001_names.py"
PROBE = "mongoshift_read_ahead_probe"
#: How long a transform waits for the next batch's read before it says it never came: a failure, not a pace.
NEVER_S = 60.0


class Reads(monitoring.CommandListener):
    """Counts the lane's reads and writes of ``people``; a transform waits until the next batch's read was sent."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.finds = 0
        self.updates = 0
        self.order: list[str] = []
        self.gave_up = False

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command.get(event.command_name) != "people" or event.command_name not in ("find", "update"):
            return
        with self.changed:
            if event.command_name == "find":
                self.finds += 1
            else:
                self.updates += 1
            self.order.append(event.command_name)
            self.changed.notify_all()

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def next_read_sent(self) -> bool:
        """Called by the transform of the batch being written: whether the read of the batch after it is sent."""
        with self.changed:
            batch = self.updates + 1  # the batch being transformed: every earlier one was written
            sent = self.changed.wait_for(lambda: self.finds > batch, timeout=0 if self.gave_up else NEVER_S)
            self.gave_up = self.gave_up or not sent  # one batch waited in vain: the test fails, and need not wait again
            return sent


@pytest.fixture
def reads() -> Iterator[Reads]:
    """The listener, also importable by the migration's transform (this process runs it)."""
    listener = Reads()
    sys.modules[PROBE] = types.SimpleNamespace(reads=listener, seen=[])  # type: ignore[assignment]
    try:
        yield listener
    finally:
        del sys.modules[PROBE]


@pytest.fixture
async def client(mongo_uri: str, reads: Reads) -> AsyncIterator[AsyncMongoClient[Any]]:
    monitored: AsyncMongoClient[Any] = AsyncMongoClient(mongo_uri, event_listeners=[reads], **TEST_CLIENT_OPTIONS)
    try:
        yield monitored
    finally:
        await monitored.close()


WAITING = '''
import mongoshift_read_ahead_probe as probe

def migrate(doc, ctx):
    if doc["n"] % 100 == 0:  # the first document of each batch of 100
        probe.seen.append(probe.reads.next_read_sent())
    doc["full_name"] = doc.pop("first", "") + " " + doc.pop("last", "")
    return doc

background = Background('''


def source(extra: str) -> str:
    quiet = "adaptive=False, max_replication_lag_ms=False, slice_ms=3_600_000,"
    return background_file(batch_size=100, extra=quiet + extra).replace("background = Background(", WAITING)


async def one_slice(project: Project, client: AsyncMongoClient[Any], *, stop_in_batch: int | None = None) -> Any:
    settings = project.settings()
    await command.up(settings)
    async with bg.open_engine(settings, client=client) as engine:
        spec = engine.spec(NAME)
        state = (await engine.coordinator.step(NAME, spec)).state
        if stop_in_batch is not None:
            probe = sys.modules[PROBE]
            listener = probe.reads  # type: ignore[attr-defined]

            def stopping() -> bool:  # the transform's wait, then a stop (Ctrl-C) while its batch is written
                sent = Reads.next_read_sent(listener)
                if len(probe.seen) + 1 == stop_in_batch:  # type: ignore[attr-defined]
                    engine.context.cancel.set("interrupted by SIGINT")  # what Ctrl-C does, from any thread
                return sent

            listener.next_read_sent = stopping
        result = await Lane(engine.context, "lane").run_slice(state, spec)
        leftover = [t for t in asyncio.all_tasks() if t.get_name() == READ_AHEAD_TASK and not t.done()]
    return result, leftover


async def test_an_unpaced_lane_reads_the_next_batch_while_it_writes(project: Project, db: AsyncDatabase[Any], client: Any, reads: Reads) -> None:
    await seed(db.people, 500)
    project.add(NAME, source(""))
    result, leftover = await one_slice(project, client)
    assert result.outcome == "done" and result.counters["migrated"] == 500 and result.counters["scanned"] == 500
    # Each of the five full batches saw the next read sent before its write; nothing read twice
    # (five batches and the read that finds the partition empty), nothing left running.
    assert sys.modules[PROBE].seen == [True] * 5  # type: ignore[attr-defined]
    assert reads.finds == 6 and reads.updates == 5 and not leftover
    assert await db.people.count_documents({"__v": 2, "full_name": {"$exists": True}}) == 500


async def test_a_paced_lane_reads_after_it_writes(project: Project, db: AsyncDatabase[Any], client: Any, reads: Reads) -> None:
    """A pause between batches (``pause_ms``, a throttle hook, the adaptive controller's pause) is room left
    for the application: a read ahead would fill it, so the lane reads each batch when its turn comes."""
    await seed(db.people, 300)
    project.add(NAME, source("").replace("pause_ms=0,", "pause_ms=1,").replace("probe.seen.append(probe.reads.next_read_sent())", "pass"))
    result, leftover = await one_slice(project, client)
    assert result.outcome == "done" and result.counters["migrated"] == 300
    assert reads.order == ["find", "update"] * 3 + ["find"] and not leftover


async def test_a_batch_read_ahead_before_a_health_wait_is_dropped_and_read_again(
    project: Project, db: AsyncDatabase[Any], client: Any, reads: Reads
) -> None:
    """A health signal that makes the lane wait before the third batch: the third batch, read ahead while
    the second was written, went stale in the wait, which was asked for to spare the server."""
    await seed(db.people, 500)
    busy = (
        "def busy():\n"
        "    if probe.reads.updates == 2 and not probe.seen:\n"
        "        probe.seen.append('waited')\n"
        "        return 1\n"
        "    return 0\n\n"
        "background = Background("
    )
    migration = source("health=[busy],").replace("probe.seen.append(probe.reads.next_read_sent())", "pass")
    project.add(NAME, migration.replace("background = Background(", busy))
    result, leftover = await one_slice(project, client)
    assert result.outcome == "done" and result.counters["migrated"] == 500 and result.counters["scanned"] == 500
    assert sys.modules[PROBE].seen == ["waited"]  # type: ignore[attr-defined]
    # The reads: the first batch; the second and third read ahead; the third read again after the wait
    # (which started no read ahead); the fourth; the fifth and the empty one read ahead again.
    assert reads.finds == 7 and reads.updates == 5 and not leftover


async def test_a_stop_drops_the_batch_read_ahead_and_counts_only_what_was_written(
    project: Project, db: AsyncDatabase[Any], client: Any, reads: Reads
) -> None:
    await seed(db.people, 500)
    project.add(NAME, source(""))
    # The third read of people (the third batch's, read ahead while the second is written) gets no answer
    # for 30 s: a stop given during the second batch ends the slice with that read still in flight.
    block = {"failCommands": ["find"], "namespace": f"{db.name}.people", "blockConnection": True, "blockTimeMS": 30_000}
    async with fail_command(client, {"skip": 2}, **block):
        result, leftover = await one_slice(project, client, stop_in_batch=2)
    # The second batch is written (a stop ends the slice after its batch); the third's read is dropped.
    assert result.outcome == "stopped" and reads.finds == 3
    assert not leftover, "the read ahead was left running after the slice"
    assert result.counters["migrated"] == 200 and result.counters["scanned"] == 200
    assert await db.people.count_documents({"__v": 2}) == 200
    # The next slice goes on from the checkpoint and reads the dropped batch again.
    sys.modules[PROBE].seen.clear()  # type: ignore[attr-defined]
    result, _ = await one_slice(project, client)
    assert result.outcome == "done" and result.counters["migrated"] == 300
    assert await db.people.count_documents({"__v": 2, "full_name": {"$exists": True}}) == 500


CODEC: CodecOptions[dict[str, Any]] = CodecOptions(document_class=dict)


def finished(docs: list[dict[str, Any]]) -> asyncio.Future[_Read]:
    future: asyncio.Future[_Read] = asyncio.get_running_loop().create_future()
    future.set_result(_lent(docs, CODEC))
    return future


async def test_a_batch_read_ahead_is_cut_to_a_smaller_size_and_taken_whole_at_a_larger_one() -> None:
    """The throttle (the operator's or the controller's) may settle on another size while the read is in
    flight: a smaller batch takes the first documents, lent anew (the rest is read again after it), a
    larger one takes the batch as read, at the size it was read at (so a full one does not end the partition)."""
    cursor = Checkpoint(last_id=7, started=True)
    docs = [{"_id": i, "tags": [i]} for i in range(8, 13)]
    taken = await _Ahead(cursor, 5, finished(docs)).take(cursor, 3, CODEC)
    assert taken is not None
    read, size = taken
    assert size == 3 and read.docs == docs[:3] and read.last == {"_id": 10, "tags": [10]}
    assert isinstance(read.batch, Lent) and read.batch.tops == docs[:3]
    taken = await _Ahead(cursor, 5, finished(docs)).take(cursor, 50, CODEC)
    assert taken is not None
    read, size = taken
    assert size == 5 and read.docs == docs and read.last == {"_id": 12, "tags": [12]}


async def test_a_batch_read_ahead_from_another_cursor_or_that_failed_is_not_taken() -> None:
    cursor = Checkpoint(last_id=7, started=True)
    pending: asyncio.Future[_Read] = asyncio.get_running_loop().create_future()
    # an equal position is not the one it was read for: the lane passes on the very cursor it was read from
    assert await _Ahead(cursor, 5, pending).take(Checkpoint(last_id=7, started=True), 5, CODEC) is None
    assert pending.cancelled()
    failed: asyncio.Future[_Read] = asyncio.get_running_loop().create_future()
    failed.set_exception(RuntimeError("the read failed"))
    assert await _Ahead(cursor, 5, failed).take(cursor, 5, CODEC) is None
