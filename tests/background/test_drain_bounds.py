"""A hash range's read sends its index bounds as documents, as mongod requires (`min`/`max` of `find`)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from bson import MaxKey, MinKey
from pymongo import AsyncMongoClient, monitoring

from mongoshift.background.lanes.modes import PartitionWork
from mongoshift.background.state.model import Checkpoint, Scope


class _Finds(monitoring.CommandListener):
    def __init__(self) -> None:
        self.commands: list[dict[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "find":
            self.commands.append(dict(event.command))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def test_a_hash_range_read_sends_its_bounds_as_documents(mongo_uri, db_name) -> None:  # type: ignore[no-untyped-def]
    scope = Scope(None, shard="s0", key=(("tenant", "hashed"),), ranges=(((MinKey(),), (MaxKey(),)),))
    job = SimpleNamespace(spec=SimpleNamespace(version_field="__v"), source=1, projection=None)
    fields: dict[str, Any] = dict.fromkeys(PartitionWork.__dataclass_fields__)
    fields.update(job=job, partition=SimpleNamespace(scope=scope), match={"__v": 1}, hint=None)
    work = PartitionWork(**fields)
    listener = _Finds()
    client: AsyncMongoClient[Any] = AsyncMongoClient(mongo_uri, event_listeners=[listener])
    try:
        find = work.find(client[db_name].people, Checkpoint(started=True), 7)
        assert find is not None
        try:
            await find.to_list(None)
        except Exception:  # the collection has no such index here: what was sent is the point
            pass
        (sent,) = listener.commands
        for bound in ("min", "max"):
            assert isinstance(sent[bound], dict), f"{bound} went as {type(sent[bound]).__name__}"  # a BSON array: mongod refuses it
            assert list(sent[bound]) == list(sent["hint"])  # the index's fields, in its order
    finally:
        await client.close()
