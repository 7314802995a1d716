"""Operating background migrations from CI and Kubernetes: totals across retries, exit codes of
stopped runs, progress lines without a terminal, failed-document reasons and a status that fits
80 columns."""

from __future__ import annotations

from mongoshift.background import command as bg
from mongoshift.runner import command

from .conftest import background_file, seed

NAME = "0001_names.py"


async def test_totals_after_retry_of_a_failed_partition_count_every_generation(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    """A partition fails (a broken batch function), the fix is pinned, retry: nothing migrated goes uncounted."""
    await seed(db.people, 1000)
    broken = '''
from mongoshift import Background

async def migrate_batch(docs, ctx):
    for doc in docs:
        doc["tag"] = "batch"
    return docs[:-1] if any(doc["_id"] >= 600 for doc in docs) else docs

background = Background(collection="people", from_version=1, to_version=2, migrate_batch=migrate_batch,
                        batch_size=100, pause_ms=0, max_slice_failures=1)
'''
    path = fast_project.add(NAME, broken)
    s = fast_project.settings()
    await command.up(s)
    (failed,) = await bg.run(s, [NAME])
    assert failed.status == "failed"
    assert 0 < await db.people.count_documents({"__v": 2}) < 1000
    path.write_text(broken.replace('return docs[:-1] if any(doc["_id"] >= 600 for doc in docs) else docs', "return docs"))
    await bg.repin(s, NAME)
    await bg.apply_control(s, NAME, "retry")
    (done,) = await bg.run(s, [NAME])
    migrated = await db.people.count_documents({"__v": 2})
    assert done.status == "completed" and migrated == 1000
    assert done.totals["migrated"] == migrated
    (shown,) = await bg.status(s, NAME)
    assert shown.totals["migrated"] == migrated


async def test_totals_after_retry_from_start_keep_what_earlier_generations_migrated(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    """Documents fail over budget, the fix is pinned, retry --from-start: the totals still match the collection."""
    await seed(db.people, 1000)
    failing = background_file(batch_size=100, extra="max_document_errors=5,")
    path = fast_project.add(NAME, failing.replace("def migrate(doc, ctx):", "def migrate(doc, ctx):\n    if doc['_id'] % 50 == 0:\n        raise ValueError('cannot split')"))
    s = fast_project.settings()
    await command.up(s)
    (failed,) = await bg.run(s, [NAME])
    assert failed.status == "failed" and failed.failed_documents > 5
    path.write_text(failing)
    await bg.repin(s, NAME)
    await bg.apply_control(s, NAME, "retry", from_start=True)
    (done,) = await bg.run(s, [NAME])
    migrated = await db.people.count_documents({"__v": 2})
    assert done.status == "completed" and migrated == 1000 and done.failed_documents == 0
    assert done.totals["migrated"] == migrated
    (shown,) = await bg.status(s, NAME)
    assert shown.totals["migrated"] == migrated
