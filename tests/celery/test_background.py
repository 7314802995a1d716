"""Background migrations through real Celery workers: a coordinator chain, lane tasks, and kill -9."""

from __future__ import annotations

import time

import pytest
from pymongo import MongoClient

from mongoshift import api

from ..background.conftest import seed
from .conftest import until

pytestmark = pytest.mark.celery

#: Slow enough per batch (20 documents, 10 ms each) that a kill lands in the middle of a slice.
SLOW_FILE = '''
import time
from mongoshift import Background

def migrate(doc, ctx):
    time.sleep(0.01)
    doc["full_name"] = doc.pop("first", "") + " " + doc.pop("last", "")
    return doc

background = Background(
    collection="people",
    from_version=1,
    to_version=2,
    migrate=migrate,
    batch_size=20,
    pause_ms=0,
    slice_ms=1000,
    max_parallel=2,
    adaptive=False,
    partitions={"min_partition_docs": 50},
)
'''

TOTAL = 600


async def test_a_worker_killed_mid_slice_is_recovered_by_the_lease_ttl(redis_harness, project, db, sync_client: MongoClient) -> None:  # type: ignore[no-untyped-def]
    project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.3)
    await seed(db.people, TOTAL)
    project.add("20260101000001_names.py", SLOW_FILE)
    await api.up(project.settings())  # registers it
    people = sync_client[project.db].people
    partitions = sync_client[project.db]["_mongoshift_background_partitions"]

    victim = redis_harness.worker("-P", "solo")
    start = redis_harness.tasks.start_background("20260101000001_names", lanes=2)
    assert start.started
    assert not redis_harness.tasks.start_background("20260101000001_names").started  # one chain per migration
    until(lambda: people.count_documents({"__v": 2}) >= 100, 60, "the first worker migrated 100 documents", redis_harness)
    victim.kill()
    done_before = people.count_documents({"__v": 2})
    assert done_before < TOTAL
    assert partitions.count_documents({"lease": {"$exists": True}}) >= 1  # the killed lane's lease is still there

    redis_harness.worker("-P", "solo")
    # the killed worker took its chain's next step with it: the beat's tick (here: by hand) starts
    # a new chain once the old one's hold lapsed
    restarted = []
    until(lambda: restarted.append(redis_harness.tasks.start_background("20260101000001_names", lanes=2)) or restarted[-1].started,
          30, "a new chain took over", redis_harness)
    final = restarted[-1].wait(timeout=120)
    assert final.status == "completed", redis_harness.logs()
    assert people.count_documents({"__v": 2, "__rev": 2}) == TOTAL  # revision +1: every document rewritten exactly once
    assert people.count_documents({"__rev": {"$ne": 2}}) == 0
    assert sum(p.get("reclaims", 0) for p in partitions.find()) >= 1  # the dead lease was reaped after its TTL
    assert partitions.count_documents({"lease": {"$exists": True}}) == 0
