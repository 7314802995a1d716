"""How often a run reads the changelog, and that what another run writes between its reads is never lost.

``up`` reads the records once before it takes the lock (the files that may run are imported first, with
nothing written) and once under the lock, which the plan comes from: a run that held the lock in between
may have applied files. The batch the run records comes from that second read (it was a third query).
"""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import AsyncMongoClient, MongoClient, monitoring

from mongoshift import api
from mongoshift.api import migrations as command

from ..conftest import TEST_CLIENT_OPTIONS

QUICK = "def up(ctx):\n    ctx.db.marks.insert_one({'file': __name__})\n\ndef down(ctx):\n    pass\n"


class Reads(monitoring.CommandListener):
    """The reads of the changelog collection, as sent."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name in ("find", "aggregate", "count") and event.command.get(event.command_name) == "_mongoshift_migrations":
            self.sent.append(dict(event.command))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def whole(reads: Reads) -> list[Any]:
    """The reads of every record (the own-collection check samples a few, ``limit``: not one of them)."""
    return [r.get("filter") for r in reads.sent if "limit" not in r]


def highest_batch(reads: Reads) -> list[dict[str, Any]]:
    """The query for the highest batch, which the read under the lock answers."""
    return [r for r in reads.sent if "batch" in (r.get("filter") or {})]


async def test_up_reads_the_changelog_before_the_lock_and_once_under_it(project, mongo_uri: str) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", QUICK)
    project.add("0002_b.py", QUICK)
    reads = Reads()
    client: AsyncMongoClient[Any] = AsyncMongoClient(mongo_uri, event_listeners=[reads], **TEST_CLIENT_OPTIONS)
    try:
        report = await api.up(project.settings(), client=client)
        assert [r.batch for r in report.results] == [1, 1]
        assert whole(reads) == [{}, {}] and not highest_batch(reads)
        await api.down(project.settings(), client=client)
        reads.sent.clear()
        report = await api.up(project.settings(), client=client)
        assert [r.batch for r in report.results] == [2, 2]  # never batch 1 again: its reverted records keep it
        assert whole(reads) == [{}, {}] and not highest_batch(reads)
    finally:
        await client.close()


async def test_a_file_applied_by_another_run_between_the_reads_is_not_run_again(
    project, mongo_uri: str, monkeypatch: pytest.MonkeyPatch, sync_client: MongoClient  # type: ignore[type-arg]
) -> None:
    """The other run held the lock while this one imported its files: the plan is made from the read under the lock."""
    project.add("0001_a.py", QUICK)
    project.add("0002_b.py", QUICK)
    checked = command.import_first

    def meanwhile(*args: Any, **kwargs: Any) -> None:
        checked(*args, **kwargs)
        sync_client[project.db]["_mongoshift_migrations"].insert_one({"name": "0001_a.py", "status": "applied", "batch": 7})

    monkeypatch.setattr(command, "import_first", meanwhile)
    report = await api.up(project.settings())
    assert [(r.name, r.batch) for r in report.results] == [("0002_b.py", 8)]
    assert sync_client[project.db]["marks"].count_documents({}) == 1
