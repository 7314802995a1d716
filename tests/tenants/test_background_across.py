"""``background watch`` and ``background dry-run`` across tenant databases, and the rollout's terminal display."""

from __future__ import annotations

import asyncio
import io
import json
import signal
import time
from typing import Any

import pytest
from pymongo import MongoClient
from rich.console import Console

from mongoshift.api.session import Background
from mongoshift.cli.tenants import _Board
from mongoshift.errors import ConfigInvalidError
from mongoshift.project.events import Event

from ..conftest import start_cli
from .conftest import TenantProject
from .test_across import FULL_NAMES, SEED, rows


def completed_everywhere(project: TenantProject, cli: Any) -> None:
    project.add("0001_seed.py", SEED)
    project.add("0002_full_names.py", FULL_NAMES)
    assert cli(project, "up", "--all-tenants").returncode == 0
    result = cli(project, "background", "run", "--all", "--all-tenants", "--concurrency", "4")
    assert result.returncode == 0, result.stderr


def wait_for(what: str, check: Any, process: Any) -> None:
    """Until ``check()`` (a state of the databases), failing if the process died or after a generous hang guard."""
    until = time.monotonic() + 120
    while not check():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < until, f"never saw {what}"
        time.sleep(0.1)


def test_one_watch_process_upgrades_late_writes_in_every_tenant_and_ends_on_sigterm(
    tenant_project: TenantProject, cli: Any, sync_client: MongoClient
) -> None:
    completed_everywhere(tenant_project, cli)
    process = start_cli(tenant_project, "background", "watch", "--all-tenants", "--save-interval", "0.2", "--json")  # type: ignore[arg-type]
    try:
        names = tenant_project.tenants
        streaming = lambda: all(  # noqa: E731
            sync_client[n]["_mongoshift_background_watch"].find_one({"_id": "users", "state": "streaming"}) for n in names
        )
        wait_for("every tenant's watcher streaming", streaming, process)
        for n in names:  # written after the migration completed, in the old shape
            sync_client[n].users.insert_one({"_id": 100, "first": "Late", "last": "Writer", "__v": 1, "__rev": 1})
        upgraded = lambda: all(sync_client[n].users.find_one({"_id": 100, "__v": 2, "name": "Late Writer"}) for n in names)  # noqa: E731
        wait_for("the late writes upgraded in every tenant", upgraded, process)
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    by_name = rows(type("R", (), {"stdout": out})())
    assert set(by_name) == set(names) and {r["outcome"] for r in by_name.values()} == {"done"}
    assert all([w["collection"] for w in r["result"]] == ["users"] for r in by_name.values())
    assert json.loads(out)["stopped"] is None  # the signal is how a watch ends, not an interruption
    for n in names:
        assert sync_client[n]["_mongoshift_background_watch"].find_one({"_id": "users"})["state"] == "stopped"
        assert "Late" not in err  # no document value on stderr


def test_a_failed_watcher_stops_the_others_unless_continue_on_error(
    tenant_project: TenantProject, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant_project.write_config()
    broken = tenant_project.tenants[1]
    started: list[str] = []
    everyone = asyncio.Event()

    async def watch(self: Background, options: Any = None) -> list[Any]:
        project = self._project
        started.append(project.settings.db)
        if len(started) == len(tenant_project.tenants):
            everyone.set()
        if project.settings.db == broken:
            await everyone.wait()  # every watcher runs when this one fails
            raise ConfigInvalidError("the live watcher needs change streams")
        await asyncio.to_thread(project.cancel.wait)  # until the rollout stops this tenant's call
        return []

    monkeypatch.setattr(Background, "watch", watch)
    result = cli(tenant_project, "background", "watch", "--all-tenants", "--json")
    assert result.returncode == 47, result.stderr
    outcomes = {name: r["outcome"] for name, r in rows(result).items()}
    assert outcomes == {n: ("failed" if n == broken else "done") for n in tenant_project.tenants}
    assert rows(result)[broken]["exit_code"] == 6

    refused = cli(tenant_project, "background", "watch", "--all-tenants", "--parallel", "2")
    assert refused.returncode == 46 and "--parallel does not apply" in refused.stderr


def test_dry_run_previews_each_tenant(tenant_project: TenantProject, cli: Any, sync_client: MongoClient) -> None:
    tenant_project.add("0001_seed.py", SEED)
    assert cli(tenant_project, "up", "--all-tenants").returncode == 0
    tenant_project.add("0002_full_names.py", FULL_NAMES)  # not registered: no up after it
    result = cli(tenant_project, "background", "dry-run", "0002_full_names.py", "--first", "2", "--all-tenants", "--json")
    assert result.returncode == 0, result.stderr
    by_name = rows(result)
    assert set(by_name) == set(tenant_project.tenants) and {r["outcome"] for r in by_name.values()} == {"done"}
    for row in by_name.values():
        previews = row["result"]["documents"]
        assert [p["after"]["name"] for p in previews] == ["Ada0 Lovelace", "Ada1 Lovelace"]
    for name in tenant_project.tenants:  # reads only
        assert sync_client[name].users.count_documents({"__v": 1}) == 30
    text = cli(tenant_project, "background", "dry-run", "0002_full_names.py", "--first", "1", "--all-tenants")
    assert text.returncode == 0 and all(f"tenant {n}:" in text.stdout for n in tenant_project.tenants)


def test_the_terminal_board_redraws_done_failed_running_rate_and_eta() -> None:
    screen = io.StringIO()
    now = [0.0]
    board = _Board(Console(file=screen, force_terminal=True, width=200), "up", now=lambda: now[0])
    board.start()

    def event(kind: str, **data: Any) -> Event:
        return Event(kind, None, data)

    board.observe(event("tenant_start", tenant="t0", running=1, total=4))
    board.observe(event("tenant_start", tenant="t1", running=2, total=4))
    assert board.note() == "failed 0, running 2 (t0, t1)"
    now[0] = 10.0
    board.observe(event("tenant_end", tenant="t0", outcome="done", running=1, finished=1, total=4, failed=0, error_kind=None))
    assert board.note() == "failed 0, running 1 (t1), 0.1 tenants/s, about 30 s left"
    board.observe(event("tenant_end", tenant="t1", outcome="failed", running=0, finished=2, total=4, failed=1, error_kind="migration_failed"))
    board.stop()
    shown = screen.getvalue()
    assert "[1/4] tenant t0: done; failed 0, running 1" in shown
    assert "[2/4] tenant t1: failed (migration_failed); failed 1, running 0" in shown
    assert "running 1 (t1)" in shown  # the redrawn line, as it was drawn


SLOW_SEED = """
def up(ctx):
    ctx.db.users.insert_many([{"_id": i, "first": f"Ada{i}", "last": "Lovelace"} for i in range(600)])
"""

SLOW_NAMES = FULL_NAMES.replace("from_version=1, to_version=2", "from_version=0, to_version=1").replace(
    "batch_size=10)", "batch_size=10, pause_ms=50, adaptive=False)"
)


def test_ctrl_c_cancels_each_tenants_background_run_and_a_rerun_finishes_with_exact_counts(
    tenant_project: TenantProject, cli: Any, sync_client: MongoClient
) -> None:
    tenant_project.add("0001_seed.py", SLOW_SEED)
    tenant_project.add("0002_full_names.py", SLOW_NAMES)
    assert cli(tenant_project, "up", "--all-tenants").returncode == 0
    names = tenant_project.tenants
    process = start_cli(tenant_project, "background", "run", "--all", "--all-tenants", "--concurrency", "2", "--json")  # type: ignore[arg-type]
    wait_for("a batch written", lambda: any(sync_client[n].users.count_documents({"__v": 1}) >= 20 for n in names), process)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 11, err
    outcomes = {r["name"]: r["outcome"] for r in json.loads(out)["tenants"]}
    assert set(outcomes.values()) <= {"cancelled", "not reached"} and "cancelled" in outcomes.values(), outcomes  # stopped, not failed
    again = cli(tenant_project, "background", "run", "--all", "--all-tenants", "--concurrency", "4", "--json")
    assert again.returncode == 0, again.stderr
    for n in names:
        assert sync_client[n].users.count_documents({"__v": 1, "name": {"$exists": True}}) == 600
        (report,) = rows(again)[n]["result"]
        assert report["status"] == "completed"
    status = cli(tenant_project, "background", "status", "--all-tenants", "--json")
    assert all(r["result"][0]["totals"]["migrated"] == 600 for r in rows(status).values())  # each document counted once


def test_retry_repin_pins_the_file_in_each_tenant(tenant_project: TenantProject, cli: Any, sync_client: MongoClient) -> None:
    """``retry --repin`` across tenants pins each tenant's migration, then retries it there (the pin went to the
    project's own database, which names none, and the command failed)."""
    tenant_project.add("0001_seed.py", SEED)
    tenant_project.add("0002_full_names.py", FULL_NAMES)
    assert cli(tenant_project, "up", "--all-tenants").returncode == 0
    assert cli(tenant_project, "background", "cancel", "0002_full_names.py", "--all-tenants", "--yes").returncode == 0
    pinned = {n: sync_client[n]["_mongoshift_background"].find_one({"_id": "0002_full_names.py"})["checksum"] for n in tenant_project.tenants}
    tenant_project.add("0002_full_names.py", FULL_NAMES.replace("batch_size=10", "batch_size=20"))
    result = cli(tenant_project, "background", "retry", "0002_full_names.py", "--repin", "--all-tenants", "--json")
    assert result.returncode == 0, result.stderr
    assert {r["outcome"] for r in rows(result).values()} == {"done"}
    for n in tenant_project.tenants:
        state = sync_client[n]["_mongoshift_background"].find_one({"_id": "0002_full_names.py"})
        assert state["checksum"] != pinned[n] and state["status"] == "pending", n


def test_verify_across_tenants_says_what_it_found_in_each(tenant_project: TenantProject, cli: Any, sync_client: MongoClient) -> None:
    """A tenant with only stranded documents (a version no migration upgrades) was said to have "old shapes found",
    the words of drift, which a pass can rewrite; each row now names what was found in it."""
    completed_everywhere(tenant_project, cli)
    drifted, stranded, *_ = tenant_project.tenants
    sync_client[drifted].users.insert_one({"_id": 100, "first": "Late", "last": "Writer", "__v": 1, "__rev": 1})
    sync_client[stranded].users.insert_one({"_id": 100, "name": "Old Writer", "__v": 0, "__rev": 1})
    result = cli(tenant_project, "background", "verify", "--all-tenants", "--json")
    assert result.returncode != 0, result.stderr
    by_name = rows(result)
    said = {name: json.dumps(by_name[name]) for name in (drifted, stranded)}
    assert "old shapes found: 0002_full_names.py" in said[drifted] and "no migration upgrades" not in said[drifted]
    assert "documents at a version no migration upgrades: 0002_full_names.py" in said[stranded]
    assert "old shapes" not in said[stranded], said[stranded]


def test_run_all_names_in_each_tenant_the_migration_it_left_out_for_a_person(
    tenant_project: TenantProject, cli: Any, sync_client: MongoClient
) -> None:
    """docs/background.md: ``run --all`` leaves a failed, paused or cancelled migration out "with a warning naming it".
    Across tenants that tenant's row said "already at target", exit 0, and nothing named what was left there."""
    tenant_project.add("0001_seed.py", SEED)
    tenant_project.add("0002_full_names.py", FULL_NAMES)
    assert cli(tenant_project, "up", "--all-tenants").returncode == 0
    held, *others = tenant_project.tenants
    assert cli(tenant_project, "background", "pause", "0002_full_names.py", "--tenant", held).returncode == 0
    result = cli(tenant_project, "background", "run", "--all", "--all-tenants")
    assert result.returncode == 0, result.stderr  # as for one database: the rest is done
    assert f"{held}: not run by --all: 0002_full_names.py (paused)" in result.stderr, result.stderr
    assert all(f"{n}: not run by --all" not in result.stderr for n in others)
    as_json = cli(tenant_project, "background", "run", "--all", "--all-tenants", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["not_runnable"] == {held: {"0002_full_names.py": "paused"}}
    assert rows(as_json)[held]["result"] == []  # each row's result stays that tenant's run reports


def test_reading_background_state_creates_no_tenant_database(tenant_project: TenantProject, cli: Any, sync_client: MongoClient) -> None:
    """``background status`` and ``verify`` only read, yet each made the engine's indexes first: every tenant listed
    in ``databases`` that did not exist yet (a customer still to be set up) was created by a look at its state."""
    tenant_project.write_config()
    for command in (["background", "status"], ["background", "status", "--check"], ["background", "verify"]):
        result = cli(tenant_project, *command, "--all-tenants", "--json")
        assert result.returncode == 0, result.stderr
        assert {r["outcome"] for r in rows(result).values()} == {"done"}
    assert not [n for n in sync_client.list_database_names() if n.startswith(tenant_project.prefix)]


def test_a_run_across_tenants_logs_each_tenants_progress(tenant_project: TenantProject, cli: Any, sync_client: MongoClient) -> None:
    """Without a terminal, one database's run logs a progress line per migration every --progress-interval; across
    tenants the flag was taken and ignored: a tenant's run said nothing between "partitioned" and "completed"."""
    tenant_project.add("0001_seed.py", SLOW_SEED)
    tenant_project.add("0002_full_names.py", SLOW_NAMES)
    two = tenant_project.tenants[:2]
    assert cli(tenant_project, "up", "--tenant", two[0], "--tenant", two[1]).returncode == 0
    result = cli(tenant_project, "background", "run", "--all", "--tenants", f"{tenant_project.prefix}[01]", "--concurrency", "2", "--progress-interval", "0.2")
    assert result.returncode == 0, result.stderr[-2000:]
    for n in two:
        lines = [line for line in result.stderr.splitlines() if line.startswith(f"mongoshift: INFO {n}: progress 0002_full_names.py: ")]
        assert lines and "600/600 documents (100%)" in lines[-1] and lines[-1].endswith("pass 1, completed"), result.stderr[-3000:]
    quiet = cli(tenant_project, "background", "run", "--all", "--tenant", two[0], "-q", "--progress-interval", "0.2")
    assert quiet.returncode == 0 and " progress " not in quiet.stderr
