"""``mongoshift audit``: each verdict of its table of checks, the exit codes, the JSON shape, and that it writes nothing.

Most cases put the project in the state to judge by writing the records directly (a background
migration registered by a real ``up``, then its state document edited), and judge it through
``api.audit`` with an injected ``now``, so that "15 minutes without a runner" needs no wait.
One case gets its verdict from a real run end to end.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bson import json_util

from mongoshift import api
from mongoshift.errors import CollectionClashError, ExecutionFailedError

from .test_cli import QUICK
from .test_status_check import BREAKS, WORKS, seed

NAME = "0001_names.py"
LATER = timedelta(minutes=16)  # past the default 15 minutes
SOON = timedelta(minutes=5)


def checks(report: api.AuditReport) -> set[str]:
    return {f.check for f in report.findings}


async def registered(project, db) -> tuple[Any, datetime]:  # type: ignore[no-untyped-def]
    """A registered (pending) background migration; returns the state collection and its registration time."""
    project.add(NAME, WORKS)
    await api.up(project.settings())
    await db.people.create_index([("__v", 1), ("_id", 1)])  # the version index: drift can be probed
    states = db["_mongoshift_background"]
    state = await states.find_one({"_id": NAME})
    return states, state["registered_at"].replace(tzinfo=UTC)


async def test_a_fresh_registration_is_healthy_and_the_report_says_so(project, db) -> None:  # type: ignore[no-untyped-def]
    _, at = await registered(project, db)
    report = await api.audit(project.settings(), now=at + SOON)
    assert report.findings == [] and report.verdict == "ok" and report.exit_code == 0
    assert "background.pending_idle" in report.checks and "line.lock_stale" in report.checks


def _partition(plan: str, status: str, **extra: Any) -> dict[str, Any]:
    return {"background": NAME, "generation": 1, "plan": plan, "seq": 0, "status": status, "scope": {"bracket": "number"}, **extra}


#: name -> (what is done to the registered migration, the checks that must find it, minutes after registration).
#: Each edit is a small async function of (states, partitions, project, at).
async def _failed(states, partitions, project, at):  # type: ignore[no-untyped-def]
    await states.update_one({"_id": NAME}, {"$set": {"status": "failed", "last_error": "boom"}})


async def _paused(states, partitions, project, at):  # type: ignore[no-untyped-def]
    await states.update_one({"_id": NAME}, {"$set": {"status": "paused"}})


async def _cancelled(states, partitions, project, at):  # type: ignore[no-untyped-def]
    await states.update_one({"_id": NAME}, {"$set": {"status": "cancelled"}})


async def _nothing(states, partitions, project, at):  # type: ignore[no-untyped-def]
    pass


async def _running(states, partitions, project, at):  # type: ignore[no-untyped-def]
    await states.update_one({"_id": NAME}, {"$set": {"status": "running"}})


async def _running_with_a_lane(states, partitions, project, at):  # type: ignore[no-untyped-def]
    await states.update_one({"_id": NAME}, {"$set": {"status": "running", "generation": 1, "plan": {"token": "P", "generation": 1}}})
    lease = {"slot": 0, "token": "t", "ttl_ms": 30_000, "renewed_at": at + LATER - timedelta(seconds=10)}
    await partitions.insert_one(_partition("P", "running", lease=lease))


async def _running_with_a_dead_lane(states, partitions, project, at):  # type: ignore[no-untyped-def]
    await states.update_one({"_id": NAME}, {"$set": {"status": "running", "generation": 1, "plan": {"token": "P", "generation": 1}}})
    await partitions.insert_one(_partition("P", "running", lease={"slot": 0, "token": "t", "ttl_ms": 30_000, "renewed_at": at}))


async def _failed_partition(states, partitions, project, at):  # type: ignore[no-untyped-def]
    await states.update_one({"_id": NAME}, {"$set": {"generation": 1, "plan": {"token": "P", "generation": 1}}})
    await partitions.insert_one(_partition("P", "failed"))


async def _old_plan(states, partitions, project, at):  # type: ignore[no-untyped-def]
    await partitions.insert_one(_partition("OLD", "pending", generation=0))


async def _document_errors(states, partitions, project, at):  # type: ignore[no-untyped-def]
    await states.update_one({"_id": NAME}, {"$set": {"status": "completed", "bad_ids": ["secret-id-1", "secret-id-2"]}})


async def _completed_without_index(states, partitions, project, at):  # type: ignore[no-untyped-def]
    await states.update_one({"_id": NAME}, {"$set": {"status": "completed"}})
    await states.database.people.drop_index("__v_1__id_1")


async def _running_without_index(states, partitions, project, at):  # type: ignore[no-untyped-def]
    await _running_with_a_lane(states, partitions, project, at)
    await states.database.people.insert_one({"_id": 1, "first": "F1", "__v": 1})
    await states.database.people.drop_index("__v_1__id_1")


async def _pending_on_an_empty_collection_without_index(states, partitions, project, at):  # type: ignore[no-untyped-def]
    await states.database.people.drop_index("__v_1__id_1")
    await states.database.people.delete_many({})  # nothing to scan yet: nothing to warn of


async def _pending_step_without_index(states, partitions, project, at):  # type: ignore[no-untyped-def]
    await states.update_one({"_id": NAME}, {"$set": {"spec.mode": "step"}})  # a step migration reads no batch
    await states.database.people.insert_one({"_id": 1, "first": "F1", "__v": 1})
    await states.database.people.drop_index("__v_1__id_1")


async def _file_changed(states, partitions, project, at):  # type: ignore[no-untyped-def]
    (project.migrations / NAME).write_text(WORKS + "\n# changed\n", encoding="utf-8")


async def _file_missing(states, partitions, project, at):  # type: ignore[no-untyped-def]
    (project.migrations / NAME).unlink()


async def _incomplete(states, partitions, project, at):  # type: ignore[no-untyped-def]
    await states.update_one({"_id": NAME}, {"$unset": {"collection": ""}})


async def _state_gone(states, partitions, project, at):  # type: ignore[no-untyped-def]
    await states.delete_one({"_id": NAME})


BACKGROUND_CASES = {
    "failed": (_failed, {"background.failed"}, SOON),
    "pending, no runner for 16 min": (_nothing, {"background.pending_idle"}, LATER),
    "running, no lane for 16 min": (_running, {"background.running_idle"}, LATER),
    "running, a live lane": (_running_with_a_lane, set(), LATER),
    "running, its lane stopped 16 min ago": (_running_with_a_dead_lane, {"background.running_idle"}, LATER),
    "paused": (_paused, {"background.paused"}, SOON),
    "cancelled": (_cancelled, {"background.cancelled"}, SOON),
    "failed partition": (_failed_partition, {"background.failed_partitions"}, SOON),
    "old-plan partitions": (_old_plan, {"background.old_plan"}, SOON),
    "completed with document errors": (_document_errors, {"background.document_errors"}, SOON),
    "completed without the version index": (_completed_without_index, {"background.no_version_index"}, SOON),
    "running without the version index": (_running_without_index, {"background.no_version_index"}, LATER),
    "a pending step migration without the version index": (_pending_step_without_index, set(), SOON),
    "pending on an empty collection without the version index": (_pending_on_an_empty_collection_without_index, set(), SOON),
    "file changed": (_file_changed, {"background.file_changed"}, SOON),
    "file missing": (_file_missing, {"background.file_missing"}, SOON),
    "state record incomplete": (_incomplete, {"background.no_state"}, SOON),
    "applied record without state": (_state_gone, {"background.no_state"}, SOON),
}


@pytest.mark.parametrize("case", list(BACKGROUND_CASES))
async def test_background_verdicts(project, db, case: str) -> None:  # type: ignore[no-untyped-def]
    states, at = await registered(project, db)
    edit, expected, after = BACKGROUND_CASES[case]
    await edit(states, db["_mongoshift_background_partitions"], project, at)
    report = await api.audit(project.settings(), now=at + after)
    assert checks(report) == expected, report.findings
    assert all(f.subject == NAME for f in report.findings)
    # a command it names is one to paste: the migration's name, not a placeholder
    assert not any("NAME" in f.message or "FILE" in f.message for f in report.findings), report.findings
    fails = {"background.failed"}
    assert report.verdict == ("ok" if not expected else "fail" if expected & fails else "warn")
    assert "secret-id" not in json.dumps(report.to_json())  # never a document id


async def test_a_state_without_status_is_refused_as_every_command_refuses_it(project, db) -> None:  # type: ignore[no-untyped-def]
    """The own-collection guard reads such a record as not mongoshift's (exit 39), before audit judges anything."""
    states, _ = await registered(project, db)
    await states.update_one({"_id": NAME}, {"$unset": {"status": ""}})
    with pytest.raises(CollectionClashError):
        await api.audit(project.settings())


async def test_the_threshold_is_settable(project, db) -> None:  # type: ignore[no-untyped-def]
    _, at = await registered(project, db)
    assert checks(await api.audit(project.settings(), now=at + SOON, stale_after=60)) == {"background.pending_idle"}
    assert checks(await api.audit(project.settings(), now=at + LATER, stale_after=3600)) == set()


# ---------------------------------------------------------------- the migration line


async def test_pending_checksum_missing_and_failed_files(project) -> None:  # type: ignore[no-untyped-def]
    settings = project.settings()
    project.add("0001_a.py", QUICK)
    project.add("0002_b.py", QUICK)
    assert checks(await api.audit(settings)) == {"line.pending"}
    await api.up(settings)
    assert (await api.audit(settings)).verdict == "ok"
    project.add("0001_a.py", QUICK + "# changed\n")
    (project.migrations / "0002_b.py").unlink()
    report = await api.audit(settings)
    assert {(f.check, f.subject) for f in report.findings} == {("line.checksum", "0001_a.py"), ("line.missing", "0002_b.py")}
    assert report.verdict == "fail" and report.exit_code == 22
    project.add("0002_b.py", QUICK)
    project.add("0001_a.py", QUICK)
    project.add("0003_c.py", "def up(ctx):\n    raise ValueError('no')\n")
    with pytest.raises(ExecutionFailedError):
        await api.up(settings)
    assert {(f.check, f.subject) for f in (await api.audit(settings)).findings} == {("line.failed", "0003_c.py")}


async def test_out_of_order_files(project) -> None:  # type: ignore[no-untyped-def]
    settings = project.settings()
    project.add("0002_b.py", QUICK)
    await api.up(settings)
    project.add("0001_a.py", QUICK)  # sorts before the applied one
    report = await api.audit(settings)
    assert {(f.check, f.subject) for f in report.findings} == {("line.pending", "0001_a.py"), ("line.out_of_order", "0001_a.py")}
    await api.up(settings)  # out_of_order = "warn": applied, in a later batch
    report = await api.audit(settings)
    assert {(f.check, f.subject) for f in report.findings} == {("line.out_of_order", "0001_a.py")}
    assert report.exit_code == 40


async def test_use_transaction_on_a_standalone_server_fails(standalone_project, project) -> None:  # type: ignore[no-untyped-def]
    standalone_project.write_config(use_transaction=True)
    report = await api.audit(standalone_project.settings())
    assert {(f.check, f.subject) for f in report.findings} == {("line.transactions", "use_transaction")}
    assert report.exit_code == 22 and "standalone" in report.findings[0].message
    standalone_project.write_config()  # off: files run without a transaction there
    assert (await api.audit(standalone_project.settings())).verdict == "ok"
    project.write_config(use_transaction=True)  # a replica set runs them
    assert (await api.audit(project.settings())).verdict == "ok"


def _exited_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.parametrize(
    ("expires", "pid", "stale"),
    [(-60, None, True), (600, "gone", True), (600, "self", False)],
    ids=["expired", "holder-process-gone", "live"],
)
async def test_a_stale_lock_warns(project, db, expires: int, pid: str | None, stale: bool) -> None:  # type: ignore[no-untyped-def]
    import socket

    now = datetime.now(UTC)
    holder_pid = _exited_pid() if pid == "gone" else os.getpid() if pid == "self" else 4242
    await db["_mongoshift_locks"].insert_one(
        {"_id": "migration_lock", "owner": "run-1", "nonce": "n", "host": socket.gethostname(), "pid": holder_pid,
         "executed_by": "ci", "ttl_ms": 60_000, "locked_at": now, "expires_at": now + timedelta(seconds=expires)}
    )
    report = await api.audit(project.settings(), now=now)
    assert checks(report) == ({"line.lock_stale"} if stale else set())


# ---------------------------------------------------------------- the command


def snapshot(sync_client, name: str) -> str:  # type: ignore[no-untyped-def]
    """Every collection of the database, its documents and its indexes."""
    db = sync_client[name]
    body = {
        c: {"docs": list(db[c].find(sort=[("_id", 1)])), "indexes": sorted(db[c].index_information().items())}
        for c in sorted(db.list_collection_names())
    }
    return hashlib.sha256(json_util.dumps(body, sort_keys=True).encode()).hexdigest()


def test_the_command_judges_a_real_run_and_writes_nothing(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0000_a.py", QUICK)
    assert cli(project, "up")[0] == 0
    code, out, _ = cli(project, "audit")
    assert code == 0 and "healthy" in out

    seed(sync_client, project)
    project.add(NAME, BREAKS)
    assert cli(project, "up")[0] == 0
    assert cli(project, "background", "run", NAME)[0] == 32  # a real run, failed
    project.add("0002_later.py", QUICK)  # pending: a warning beside the failure
    sync_client[project.db]["_mongoshift_locks"].insert_one(
        {"_id": "migration_lock", "owner": "dead-run", "host": "elsewhere", "pid": 1, "expires_at": datetime(2000, 1, 1)}
    )
    before = snapshot(sync_client, project.db)
    code, out, _ = cli(project, "audit", "--json")
    assert snapshot(sync_client, project.db) == before  # no lock, no index, no record
    document = json.loads(out)
    assert code == 22 and document["verdict"] == "fail" and document["exit_code"] == 22
    assert set(document) == {"verdict", "exit_code", "findings", "checks", "checked_at", "stale_after_seconds"}
    assert {(f["check"], f["severity"], f["subject"]) for f in document["findings"]} == {
        ("background.failed", "fail", NAME),
        ("line.pending", "warn", "0002_later.py"),
        ("line.lock_stale", "warn", "lock"),
    }
    assert all(set(f) == {"check", "severity", "subject", "message"} for f in document["findings"])
    code, out, _ = cli(project, "audit")
    assert code == 22 and "background.failed" in out and "1 failed, 2 warnings" in out


def test_warnings_only_exit_40_and_a_bad_threshold_is_refused(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", QUICK)
    code, out, _ = cli(project, "audit", "--json")
    assert code == 40 and json.loads(out)["verdict"] == "warn"
    assert cli(project, "audit", "--stale-after", "-1")[0] == 6
    code, out, _ = cli(project, "audit", "--stale-after", "1e300", "--json")  # past any date: it crashed, exit 1
    assert code == 6 and "from 0 to 31,536,000" in json.loads(out)["error"]["message"]


def test_quiet_says_a_failing_verdict_on_stderr_and_nothing_when_healthy(project, cli) -> None:  # type: ignore[no-untyped-def]
    """With -q the table goes, but an exit 40 or 22 is never the only word (as 'status --check -q' says its own)."""
    code, out, err = cli(project, "-q", "audit")
    assert (code, out, err) == (0, "", "")  # nothing to judge: healthy, and silent
    project.add("0001_a.py", QUICK)
    code, out, err = cli(project, "-q", "audit")
    assert code == 40 and out == "" and "warning: audit: 0 failed, 1 warning" in err


def test_old_shapes_written_after_completion_warn_without_their_id(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    seed(sync_client, project)
    project.add(NAME, WORKS)
    assert cli(project, "up")[0] == 0
    assert cli(project, "background", "run", NAME)[0] == 0
    assert cli(project, "audit")[0] == 0  # completed, nothing of the old shape left
    sync_client[project.db].people.insert_one({"_id": "secret-id-late", "first": "F", "__v": 1, "__rev": 1})  # an old writer
    before = snapshot(sync_client, project.db)
    code, out, _ = cli(project, "audit", "--json")
    assert snapshot(sync_client, project.db) == before  # found, not reopened
    document = json.loads(out)
    assert code == 40 and {(f["check"], f["subject"]) for f in document["findings"]} == {("background.drift", NAME)}
    assert "secret-id-late" not in out


def test_documents_no_migration_can_upgrade_warn_as_stranded_without_their_id(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    seed(sync_client, project)
    project.add(NAME, WORKS)
    assert cli(project, "up")[0] == 0
    assert cli(project, "background", "run", NAME)[0] == 0
    sync_client[project.db].people.insert_one({"_id": "secret-id-zero", "first": "F", "__v": 0})  # below every migration
    code, out, _ = cli(project, "audit", "--json")
    document = json.loads(out)
    assert code == 40 and {(f["check"], f["subject"]) for f in document["findings"]} == {("background.stranded", NAME)}
    assert "background.stranded" in document["checks"] and "secret-id-zero" not in out


def test_a_version_that_is_not_a_number_warns_as_stranded_without_its_id(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """``__v: "1"`` is no valid version (converge's min guard says the same): no migration upgrades it."""
    seed(sync_client, project)
    project.add(NAME, WORKS)
    assert cli(project, "up")[0] == 0
    assert cli(project, "background", "run", NAME)[0] == 0
    sync_client[project.db].people.insert_one({"_id": "secret-id-text", "first": "F", "__v": "1"})
    code, out, _ = cli(project, "audit", "--json")
    document = json.loads(out)
    assert code == 40 and {(f["check"], f["subject"]) for f in document["findings"]} == {("background.stranded", NAME)}
    assert "secret-id-text" not in out
    (finding,) = document["findings"]  # its cure is named: no migration can start from a text version
    assert "not a number" in finding["message"] and "store it as a number" in finding["message"], finding["message"]
