"""Background migrations on the events of the line: a transform's ``ctx.log``, an inline run under ``up`` (issue 14 items 1 and 2)."""

from __future__ import annotations

from mongoshift import api
from mongoshift.project.events import Event

from .conftest import seed

LOGGING = '''
from mongoshift import Background

def migrate(doc, ctx):
    if doc["_id"] == 0:
        ctx.log.info("first document", partition=ctx.partition)
    doc["full_name"] = doc.pop("first") + " " + doc.pop("last")
    return doc

background = Background(collection="people", from_version=1, to_version=2, migrate=migrate, batch_size=50, pause_ms=0)
'''


async def test_a_transform_logs_events_with_the_run_id(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 20)
    fast_project.add("0001_names.py", LOGGING)
    s = fast_project.settings()
    await api.up(s)
    seen: list[Event] = []
    reports = await api.run_background(s, observers=[seen.append])

    assert [r.status for r in reports] == ["completed"]
    logs = [e for e in seen if e.kind == "log"]
    assert [(e.migration, e.data["message"], e.data["direction"], e.data["data"]) for e in logs] == [
        ("0001_names.py", "first document", "forward", {"partition": "0"})
    ]
    assert logs[0].run_id is not None and {e.run_id for e in seen} == {logs[0].run_id}


async def test_an_inline_run_reaches_the_observers_of_up(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 20)
    fast_project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.2, background_inline=True)
    fast_project.add("0001_names.py", LOGGING)
    seen: list[Event] = []
    report = await api.up(fast_project.settings(), observers=[seen.append])
    kinds = [e.kind for e in seen]
    assert kinds.index("migration_start") < kinds.index("registered") < kinds.index("log") < kinds.index("completed") < kinds.index("migration_end")
    assert {e.run_id for e in seen} == {report.run_id}
