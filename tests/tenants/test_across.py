"""Commands across tenant databases on the embedded server: rollout, failure, resume, canary, lock, status, provider."""

from __future__ import annotations

import json
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pymongo import MongoClient

from mongoshift.api.tenants import Tenants, across_tenants, down_across, select_tenants, status_across, up_across
from mongoshift.project.events import Event

from ..conftest import cli_process, reaped, start_cli
from .conftest import TenantProject

COUNTED = """
def up(ctx):
    if ctx.db.fail_here.find_one({{"file": "{file}"}}) is not None:
        raise RuntimeError("told to fail")
    ctx.db.counters.update_one({{"_id": "{file}"}}, {{"$inc": {{"n": 1}}}}, upsert=True)


def down(ctx):
    ctx.db.counters.update_one({{"_id": "{file}"}}, {{"$inc": {{"n": -1}}}})
"""

TRANSACTIONAL = """
use_transaction = True


async def up(ctx):
    if await ctx.db.fail_here.find_one({{"file": "{file}"}}, session=ctx.session) is not None:
        raise RuntimeError("told to fail")
    await ctx.db.counters.update_one({{"_id": "{file}"}}, {{"$inc": {{"n": 1}}}}, upsert=True, session=ctx.session)


async def down(ctx):
    await ctx.db.counters.update_one({{"_id": "{file}"}}, {{"$inc": {{"n": -1}}}}, session=ctx.session)
"""


def two_migrations(project: TenantProject) -> None:
    project.add("0001_a.py", COUNTED.format(file="0001"))
    project.add("0002_b.py", TRANSACTIONAL.format(file="0002"))


def counters(client: MongoClient, db: str) -> dict[str, int]:
    return {d["_id"]: d["n"] for d in client[db].counters.find()}


def applied(client: MongoClient, db: str) -> list[str]:
    return sorted(d["name"] for d in client[db]["_mongoshift_migrations"].find({"status": "applied"}))


def use_provider(project: TenantProject, spec: str, source: str) -> None:
    """``[tenants] provider = spec``, its module (``spec``'s part before the colon) written beside the project file."""
    module = spec.split(":")[0]
    (project.root / f"{module}.py").write_text(source, encoding="utf-8")
    project.write_config(provider=spec)


def rows(result) -> dict[str, dict]:  # type: ignore[no-untyped-def]
    return {row["name"]: row for row in json.loads(result.stdout)["tenants"]}


def test_up_across_every_tenant_and_a_rerun_does_nothing(tenant_project: TenantProject, cli, sync_client: MongoClient) -> None:  # type: ignore[no-untyped-def]
    two_migrations(tenant_project)
    result = cli(tenant_project, "up", "--all-tenants", "--parallel", "2", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)  # one document
    assert [r["name"] for r in document["tenants"]] == tenant_project.tenants
    assert all(r["outcome"] == "done" and r["applied"] == 2 and r["exit_code"] == 0 for r in document["tenants"])
    assert document["summary"]["done"] == 4 and document["exit_code"] == 0
    for line in (f"tenant {name}: done; failed 0" for name in tenant_project.tenants):
        assert line in result.stderr  # one plain line per tenant outcome
    for name in tenant_project.tenants:
        assert f"{name}: applying 0002_b.py" in result.stderr  # a log line names its tenant
    again = cli(tenant_project, "up", "--all-tenants", "--json")
    assert again.returncode == 0 and {r["outcome"] for r in rows(again).values()} == {"already at target"}
    for name in tenant_project.tenants:
        assert counters(sync_client, name) == {"0001": 1, "0002": 1} and applied(sync_client, name) == ["0001_a.py", "0002_b.py"]


def test_a_failure_stops_new_tenants_and_the_rerun_resumes(tenant_project: TenantProject, cli, sync_client: MongoClient) -> None:  # type: ignore[no-untyped-def]
    two_migrations(tenant_project)
    t0, t1, t2, t3 = tenant_project.tenants
    sync_client[t1].fail_here.insert_one({"file": "0002"})
    result = cli(tenant_project, "up", "--all-tenants", "--parallel", "1", "--json")
    assert result.returncode == 47, result.stderr
    by_name = rows(result)
    assert by_name[t0]["outcome"] == "done" and by_name[t1]["outcome"] == "failed"
    assert by_name[t1]["error"]["kind"] == "execution_failed" and by_name[t1]["exit_code"] == 7
    assert by_name[t1]["applied"] == 1  # 0001 applied before 0002 failed
    assert by_name[t2]["outcome"] == by_name[t3]["outcome"] == "not reached" and by_name[t2]["exit_code"] is None
    assert json.loads(result.stdout)["stopped"].startswith(f"stopped after {t1} failed")
    assert counters(sync_client, t1) == {"0001": 1} and counters(sync_client, t2) == {}  # the transaction left nothing

    sync_client[t1].fail_here.drop()
    rerun = cli(tenant_project, "up", "--all-tenants", "--parallel", "3", "--json")
    assert rerun.returncode == 0, rerun.stderr
    by_name = rows(rerun)
    assert by_name[t0]["outcome"] == "already at target"
    assert by_name[t1]["outcome"] == "done" and by_name[t1]["applied"] == 1
    assert by_name[t2]["applied"] == by_name[t3]["applied"] == 2
    for name in tenant_project.tenants:  # every migration recorded applied once, its effect present once
        assert counters(sync_client, name) == {"0001": 1, "0002": 1} and applied(sync_client, name) == ["0001_a.py", "0002_b.py"]


def test_continue_on_error_reaches_every_tenant(tenant_project: TenantProject, cli, sync_client: MongoClient) -> None:  # type: ignore[no-untyped-def]
    two_migrations(tenant_project)
    t0, t1, t2, t3 = tenant_project.tenants
    sync_client[t0].fail_here.insert_one({"file": "0001"})
    sync_client[t2].fail_here.insert_one({"file": "0002"})
    result = cli(tenant_project, "up", "--all-tenants", "--parallel", "1", "--continue-on-error")
    assert result.returncode == 47
    assert "4 tenants: 2 done, 2 failed" in result.stderr  # the summary, a warning since not every tenant is done
    assert counters(sync_client, t1) == counters(sync_client, t3) == {"0001": 1, "0002": 1}
    assert counters(sync_client, t0) == {} and counters(sync_client, t2) == {"0001": 1}


def test_quiet_still_names_each_tenant_that_is_not_done(tenant_project: TenantProject, cli, sync_client: MongoClient) -> None:  # type: ignore[no-untyped-def]
    """``-q`` leaves the table out; it left only "4 tenants: 1 done, 1 failed, 2 not reached": which tenant failed,
    and why, was said nowhere (one database's ``up -q`` prints its error)."""
    two_migrations(tenant_project)
    t0, t1, t2, t3 = tenant_project.tenants
    sync_client[t1].fail_here.insert_one({"file": "0002"})
    result = cli(tenant_project, "up", "--all-tenants", "--parallel", "1", "-q")
    assert result.returncode == 47 and result.stdout == ""
    assert f"tenant {t1}: failed: execution_failed: 0002_b.py failed: RuntimeError: told to fail" in result.stderr, result.stderr
    assert f"not reached: {t2}, {t3}" in result.stderr and f"tenant {t0}:" not in result.stderr
    sync_client[t1].fail_here.drop()
    done = cli(tenant_project, "up", "--all-tenants", "-q")
    assert done.returncode == 0 and done.stdout == "" and done.stderr == ""  # a rollout that succeeds says nothing


def test_a_failed_canary_leaves_the_other_tenants_untouched(tenant_project: TenantProject, cli, sync_client: MongoClient) -> None:  # type: ignore[no-untyped-def]
    two_migrations(tenant_project)
    first, *others = tenant_project.tenants
    sync_client[first].fail_here.insert_one({"file": "0002"})
    result = cli(tenant_project, "up", "--all-tenants", "--canary", "1", "--parallel", "4", "--json")
    assert result.returncode == 47
    assert rows(result)[first]["canary"] is True and rows(result)[first]["outcome"] == "failed"
    assert all(rows(result)[name]["outcome"] == "not reached" for name in others)
    existing = set(sync_client.list_database_names())
    assert not existing & set(others)  # not one write: not even their databases exist


def test_a_tenant_whose_lock_is_held_is_reported_locked(tenant_project: TenantProject, cli, sync_client: MongoClient) -> None:  # type: ignore[no-untyped-def]
    two_migrations(tenant_project)
    held = tenant_project.tenants[2]
    lock = {"_id": "migration_lock", "owner": "other", "nonce": "n", "host": "elsewhere", "pid": 1, "executed_by": "x", "ttl_ms": 600_000}
    sync_client[held]["_mongoshift_locks"].insert_one({**lock, "expires_at": datetime.now(UTC) + timedelta(minutes=10)})
    result = cli(tenant_project, "up", "--all-tenants", "--json")
    assert result.returncode == 47
    by_name = rows(result)
    assert by_name[held]["outcome"] == "locked" and by_name[held]["error"]["kind"] == "lock_held" and by_name[held]["exit_code"] == 3
    assert sum(1 for r in by_name.values() if r["outcome"] == "done") == 3  # a locked tenant does not stop the others
    assert counters(sync_client, held) == {}
    # The command it advises acts on that tenant: a bare 'mongoshift unlock' acts on no database in a project of tenants.
    assert f"'mongoshift unlock --tenant {held}'" in by_name[held]["error"]["message"], by_name[held]["error"]["message"]


def test_an_advised_command_names_the_tenant_unless_it_names_a_database_or_needs_quoting() -> None:
    from mongoshift.tenants.rollout import for_tenant

    said = "clear it with 'mongoshift unlock' or 'mongoshift up --db other'"
    assert for_tenant(said, "acme") == "clear it with 'mongoshift unlock --tenant acme' or 'mongoshift up --db other'"
    assert for_tenant(said, "o'brien") == said  # a name the shell would need quoted is left for the user to add


def test_status_across_tenants_counts_each_migration_and_check_fails_when_one_is_behind(
    tenant_project: TenantProject, cli, sync_client: MongoClient
) -> None:  # type: ignore[no-untyped-def]
    two_migrations(tenant_project)
    behind = tenant_project.tenants[3]
    assert cli(tenant_project, "up", "--tenants", f"{tenant_project.prefix}[012]").returncode == 0
    result = cli(tenant_project, "status", "--all-tenants", "--check", "--json")
    assert result.returncode == 47
    document = json.loads(result.stdout)
    assert document["migrations"] == [
        {"migration": "0001_a.py", "applied": 3, "pending": 1, "failed": 0, "other": 0},
        {"migration": "0002_b.py", "applied": 3, "pending": 1, "failed": 0, "other": 0},
    ]
    by_name = rows(result)
    assert by_name[behind]["outcome"] == "failed" and by_name[behind]["exit_code"] == 2 and by_name[behind]["error"]["kind"] == "pending"
    assert [r["state"] for r in by_name[behind]["result"]] == ["pending", "pending"]
    plain = cli(tenant_project, "status", "--all-tenants")
    assert plain.returncode == 0 and "migrations across tenants" in plain.stdout


def header_after(stdout: str, title: str) -> list[str]:
    """The column names of the piped table titled ``title``."""
    lines = stdout.splitlines()
    return lines[lines.index(title) + 1].split("\t")


def test_the_report_counts_migrations_only_for_commands_that_run_them(tenant_project: TenantProject, cli) -> None:  # type: ignore[no-untyped-def]
    """A read-only command's table had ``applied`` and ``rolled back`` columns of zeros beside tenants whose every
    migration is applied ("applied 0" for a tenant where two are): only commands that run (or record) migrations
    count them."""
    two_migrations(tenant_project)
    up = cli(tenant_project, "up", "--all-tenants")
    assert up.returncode == 0, up.stderr
    assert header_after(up.stdout, "up across tenants") == ["tenant", "outcome", "applied", "rolled back", "duration", "note"]
    for command in (["status"], ["list"], ["lock"], ["audit"], ["converge", "--check"]):
        result = cli(tenant_project, *command, "--all-tenants")
        assert result.returncode == 0, result.stderr
        header = header_after(result.stdout, f"{' '.join(command)} across tenants")
        assert header == ["tenant", "outcome", "duration", "note"], (command, header)
    dry = cli(tenant_project, "dry-run", "down", "--all-tenants")
    assert header_after(dry.stdout, "dry-run down across tenants")[2:4] == ["would apply", "would roll back"]


def test_each_tenants_warnings_are_printed_and_a_reverted_file_counts_as_pending(tenant_project: TenantProject, cli) -> None:  # type: ignore[no-untyped-def]
    """Across tenants, the warnings ``up --db TENANT`` prints (here: a file changed on disk after it was
    applied) reach stderr named by tenant, not only the ``--json`` rows; and a file rolled back in a
    tenant is pending there, as its own ``status`` counts it (it was ``other``)."""
    two_migrations(tenant_project)
    first, second = tenant_project.tenants[:2]
    assert cli(tenant_project, "up", "--all-tenants").returncode == 0
    path = tenant_project.root / "migrations" / "0002_b.py"
    path.write_text(path.read_text() + "# edited after it was applied\n")
    result = cli(tenant_project, "up", "--tenant", first, "--tenant", second)
    assert result.returncode == 0, result.stderr
    for name in (first, second):
        assert f"{name}: 0002_b.py changed on disk after it was applied" in result.stderr, result.stderr
    assert cli(tenant_project, "down", "--tenant", first).returncode == 0
    status = cli(tenant_project, "status", "--all-tenants", "--json")
    counts = {m["migration"]: m for m in json.loads(status.stdout)["migrations"]}
    assert counts["0002_b.py"]["pending"] == 1 and counts["0002_b.py"]["other"] == 0


def test_a_dry_run_across_tenants_says_what_would_run_and_runs_nothing(tenant_project: TenantProject, cli, sync_client: MongoClient) -> None:  # type: ignore[no-untyped-def]
    two_migrations(tenant_project)
    first = tenant_project.tenants[0]
    assert cli(tenant_project, "up", "--tenant", first).returncode == 0
    result = cli(tenant_project, "dry-run", "up", "--all-tenants", "--json")
    assert result.returncode == 0, result.stderr
    rows_said = json.loads(result.stdout)["tenants"]
    assert [(r["outcome"], r["would_apply"]) for r in rows_said] == [("already at target", 0)] + [("done", 2)] * 3
    assert not any("applied" in r for r in rows_said)  # nothing was applied: the counts say what would be
    plain = cli(tenant_project, "dry-run", "up", "--all-tenants")
    assert plain.returncode == 0 and "would apply" in plain.stdout and "applied" not in plain.stdout.replace("would apply", "")
    assert all(counters(sync_client, name) == {} for name in tenant_project.tenants[1:])


def test_under_log_format_json_every_stderr_line_of_a_rollout_is_json(tenant_project: TenantProject, cli) -> None:  # type: ignore[no-untyped-def]
    two_migrations(tenant_project)
    result = cli(tenant_project, "up", "--all-tenants", "--log-format", "json", "--json")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stderr.splitlines()]  # each one a JSON object
    ends = [line for line in lines if line["message"].startswith("[")]
    assert sorted(line["tenant"] for line in ends) == tenant_project.tenants and all(": done;" in line["message"] for line in ends)


def test_down_across_tenants_rolls_back_each_one(tenant_project: TenantProject, cli, sync_client: MongoClient) -> None:  # type: ignore[no-untyped-def]
    two_migrations(tenant_project)
    assert cli(tenant_project, "up", "--all-tenants").returncode == 0
    result = cli(tenant_project, "down", "--tenant", tenant_project.tenants[0], "--tenant", tenant_project.tenants[1], "--json")
    assert result.returncode == 0, result.stderr
    assert [r["rolled_back"] for r in json.loads(result.stdout)["tenants"]] == [2, 2]
    assert counters(sync_client, tenant_project.tenants[0]) == {"0001": 0, "0002": 0}
    assert counters(sync_client, tenant_project.tenants[2]) == {"0001": 1, "0002": 1}  # not selected: untouched


def test_a_provider_reads_the_tenants_from_a_collection(tenant_project: TenantProject, cli, sync_client: MongoClient) -> None:  # type: ignore[no-untyped-def]
    two_migrations(tenant_project)
    control = f"{tenant_project.prefix}control"
    active, inactive = tenant_project.tenants[:3], tenant_project.tenants[3]
    sync_client[control].tenants.insert_many([{"db": n, "active": True} for n in reversed(active)] + [{"db": inactive, "active": False}])
    use_provider(
        tenant_project, "saas_tenants:active",
        "from pymongo import MongoClient\n\n\n"
        "def active(settings):\n"
        "    with MongoClient(settings.uri) as client:\n"
        f"        return [d['db'] for d in client[{control!r}].tenants.find({{'active': True}}).sort('_id', 1)]\n",
    )
    result = cli(tenant_project, "up", "--all-tenants", "--json")
    assert result.returncode == 0, result.stderr
    assert [r["name"] for r in json.loads(result.stdout)["tenants"]] == list(reversed(active))  # the provider's order
    assert counters(sync_client, inactive) == {}


def test_a_tenant_on_an_unreachable_cluster_fails_its_own_row_only(tenant_project: TenantProject, cli, sync_client: MongoClient) -> None:  # type: ignore[no-untyped-def]
    """A provider's tenant on a cluster nobody answers at: that row fails with the connection's code, the others run."""
    two_migrations(tenant_project)
    here, away = tenant_project.tenants[:2], f"{tenant_project.prefix}away"
    use_provider(
        tenant_project, "split_tenants:placed",
        f"def placed(settings):\n    return [{here[0]!r}, ({away!r}, 'mongodb://127.0.0.1:1/?connectTimeoutMS=2000'), {here[1]!r}]\n",
    )
    status = cli(tenant_project, "status", "--all-tenants", "--json")
    assert status.returncode == 47, status.stderr
    by_name = rows(status)
    assert [by_name[n]["outcome"] for n in (*here, away)] == ["done", "done", "failed"]
    assert by_name[away]["exit_code"] == 5 and by_name[away]["error"]["kind"] == "connection_failed"
    up = cli(tenant_project, "up", "--all-tenants", "--continue-on-error", "--json")
    assert up.returncode == 47, up.stderr
    assert [rows(up)[n]["applied"] for n in here] == [2, 2]
    assert all(counters(sync_client, n) == {"0001": 1, "0002": 1} for n in here)


def test_the_mongoshift_command_imports_a_provider_beside_the_project_file(tenant_project: TenantProject) -> None:
    """The console script's sys.path starts with its own folder; the provider beside mongoshift.toml imports anyway."""
    import subprocess
    import sys

    from ..conftest import cli_env

    (tenant_project.root / "saas").mkdir()
    (tenant_project.root / "saas" / "__init__.py").write_text("")
    (tenant_project.root / "saas" / "tenants.py").write_text(f"def active(settings):\n    return {tenant_project.tenants[:2]!r}\n")
    tenant_project.write_config(provider="saas.tenants:active")
    env = {k: v for k, v in cli_env().items() if k != "PYTHONPATH"}
    script = Path(sys.executable).parent / "mongoshift"
    result = subprocess.run([str(script), "status", "--all-tenants", "--json"], cwd=tenant_project.root, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert [r["name"] for r in json.loads(result.stdout)["tenants"]] == tenant_project.tenants[:2]


def test_bad_input_is_refused_before_anything_is_written(tenant_project: TenantProject, cli, sync_client: MongoClient) -> None:  # type: ignore[no-untyped-def]
    two_migrations(tenant_project)
    for args, text in [
        (["--tenant", "nobody"], "not a tenant of the [tenants] selection: nobody"),
        (["--tenants", "zz*"], "matches none"),
        (["--all-tenants", "--parallel", "0"], "--parallel must be"),
        (["--all-tenants", "--canary", "5"], "--canary 5 is more than the 4 selected tenants"),
        (["--parallel", "2"], "needs a selection"),
    ]:
        result = cli(tenant_project, "up", *args, "--json")
        assert result.returncode == 46, (args, result.stderr)
        error = json.loads(result.stdout)["error"]
        assert error["kind"] == "tenants_invalid" and text in error["message"]
        assert "(--" not in error["message"], error  # the flags' words alone, not the API's beside them
    tenant_project.write_config(provider="no_such_package.tenants:names")
    result = cli(tenant_project, "up", "--all-tenants", "--json")
    assert result.returncode == 46 and "no_such_package.tenants:names failed to import" in json.loads(result.stdout)["error"]["message"]
    assert not set(sync_client.list_database_names()) & set(tenant_project.tenants)


def test_a_file_that_does_not_import_fails_the_rollout_once_before_any_tenant(tenant_project: TenantProject, cli, sync_client: MongoClient) -> None:  # type: ignore[no-untyped-def]
    """The files are read once for the whole rollout: a broken one failed each tenant in turn (47),
    each tenant's database created with its lock and changelog before the file was imported."""
    two_migrations(tenant_project)
    tenant_project.add("0003_broken.py", "async def up(ctx)\n    pass\n")
    result = cli(tenant_project, "up", "--all-tenants", "--json")
    assert result.returncode == 20, result.stderr
    error = json.loads(result.stdout)["error"]
    assert error["kind"] == "invalid_export" and "0003_broken.py" in error["message"]
    assert not set(sync_client.list_database_names()) & set(tenant_project.tenants)
    assert cli(tenant_project, "up", "--all-tenants", "--to", "0002_b").returncode == 0  # a file past --to is not run, nor imported


def test_a_name_no_file_has_is_refused_once_before_any_tenant(tenant_project: TenantProject, cli, sync_client: MongoClient) -> None:  # type: ignore[no-untyped-def]
    """``up --to`` or ``up FILE`` with a typo is refused by the files alone, as for one database (exit 8): across
    tenants it failed every tenant that started (each taking its lock and writing its changelog first), exit 47."""
    two_migrations(tenant_project)
    for args in (("--to", "0002_bb"), ("0003_c.py",), ("--to", "0002_b.txt")):
        result = cli(tenant_project, "up", *args, "--all-tenants", "--json")
        assert result.returncode == 8, (args, result.stdout, result.stderr)
        error = json.loads(result.stdout)["error"]
        assert error["kind"] == "file_not_found" and "migration file not found" in error["message"], error
    baseline = cli(tenant_project, "baseline", "--to", "0002_bb", "--dry-run", "--all-tenants", "--json")  # as without --dry-run
    assert baseline.returncode == 8 and json.loads(baseline.stdout)["error"]["kind"] == "file_not_found", baseline.stdout
    assert not set(sync_client.list_database_names()) & set(tenant_project.tenants)


async def test_up_across_refuses_a_name_no_file_has_before_any_tenant(tenant_project: TenantProject, sync_client: MongoClient) -> None:
    from mongoshift.errors import FileNotFoundMigrationError

    two_migrations(tenant_project)
    for options in ({"to": "0002_bb"}, {"target": "0009_z"}):
        with pytest.raises(FileNotFoundMigrationError):
            await up_across(tenant_project.settings(), Tenants(all=True), **options)
    assert not set(sync_client.list_database_names()) & set(tenant_project.tenants)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        # each of these failed every tenant's row with "unexpected TypeError" (exit 47), or read a text flag as True
        (lambda s: up_across(s, Tenants(all=True), bogus=1), "config_invalid", "up_across takes no option bogus: it takes target, to, step"),
        (lambda s: down_across(s, Tenants(all=True), step=1), "config_invalid", "down_across takes no option step:"),
        (lambda s: across_tenants(s, "status", Tenants(all=True)), "config_invalid", "call must be a function given the tenant's session"),
        (lambda s: across_tenants(s, lambda ms: ms.status(), Tenants(all=True), judge=None), "config_invalid", "judge must be a function"),
        (lambda s: status_across(s, Tenants(all=True), check="no"), "config_invalid", "check must be True or False, not str"),
        (lambda s: up_across(s, Tenants(all=True, continue_on_error="no")), "tenants_invalid", "Tenants(continue_on_error=...) must be True or False"),
        (lambda s: status_across(s, Tenants(all="no")), "tenants_invalid", "Tenants(all=...) must be True or False, not str"),
        # a TypeError from deep in the selection, or a mapping read by its keys
        (lambda s: select_tenants(s, Tenants(pattern=5)), "tenants_invalid", "Tenants(pattern=...) takes a glob as text (for example 'tenant_*'), not int"),
        (lambda s: select_tenants(s, Tenants(names=None)), "tenants_invalid", "Tenants.names takes a list of database names, not NoneType"),
        (lambda s: up_across(s, Tenants(names={"t": 1})), "tenants_invalid", "Tenants.names takes a list of database names, not dict"),
    ],
    ids=[
        "up-unknown-option", "down-unknown-option", "call-not-a-function", "judge-not-a-function", "check-text", "continue-text", "all-text",
        "pattern-not-text", "names-none", "names-a-mapping",
    ],
)
async def test_a_wrong_argument_across_tenants_is_refused_once_before_any_tenant(  # type: ignore[no-untyped-def]
    tenant_project: TenantProject, sync_client: MongoClient, call, error, message
) -> None:
    from mongoshift.errors import MongoshiftError

    two_migrations(tenant_project)
    with pytest.raises(MongoshiftError) as refused:
        await call(tenant_project.settings())
    assert refused.value.kind == error and message in refused.value.message
    assert not set(sync_client.list_database_names()) & set(tenant_project.tenants)


def test_background_commands_act_on_each_tenant(tenant_project: TenantProject, cli) -> None:  # type: ignore[no-untyped-def]
    two_migrations(tenant_project)
    assert cli(tenant_project, "up", "--all-tenants").returncode == 0
    status = cli(tenant_project, "background", "status", "--all-tenants", "--json")
    assert status.returncode == 0 and all(r["result"] == [] for r in rows(status).values())
    pause = cli(tenant_project, "background", "pause", "nothing_registered", "--all-tenants", "--json")
    assert pause.returncode == 47  # not registered in any tenant: each says so (9)
    assert {(r["outcome"], r["exit_code"]) for r in rows(pause).values()} == {("failed", 9)}


async def test_the_bound_holds_on_real_runs_observed_through_events(tenant_project: TenantProject, monkeypatch: pytest.MonkeyPatch) -> None:
    (tenant_project.root / "tenant_gate.py").write_text(
        "import asyncio\n\nrunning = 0\npeak = 0\nfull = asyncio.Event()\n\n\n"
        "async def enter(bound):\n"
        "    global running, peak\n"
        "    running += 1\n"
        "    peak = max(peak, running)\n"
        "    if running == bound:\n"
        "        full.set()\n"
        "    await full.wait()  # the first tenants meet here, so the bound is reached\n"
        "    running -= 1\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tenant_project.root))
    tenant_project.add("0001_gate.py", "import tenant_gate\n\n\nasync def up(ctx):\n    await tenant_gate.enter(2)\n")
    events: list[Event] = []
    report = await up_across(tenant_project.settings(), Tenants(all=True, parallel=2), observers=[events.append])
    assert report.ok, report.rows
    import tenant_gate  # type: ignore[import-not-found]

    assert tenant_gate.peak == 2
    open_runs: set[str] = set()
    most = 0
    for event in events:  # every run's own events carry its tenant's database
        if event.kind == "run_start":
            open_runs.add(event.data["db"])
            most = max(most, len(open_runs))
        elif event.kind == "run_end":
            open_runs.discard(event.data["db"])
    assert most == 2 and {e.data["db"] for e in events if e.kind == "run_start"} == set(tenant_project.tenants)
    assert max(e.data["running"] for e in events if e.kind == "tenant_start") == 2
    assert all(e.data["tenant"] in tenant_project.tenants for e in events)  # every event names its tenant
    assert all(e.data["db"] == e.data["tenant"] for e in events if e.kind == "run_start")


async def test_a_python_call_without_a_database_is_told_the_python_way_to_name_one(tenant_project: TenantProject) -> None:
    """The refusal named only the command line's flags (``--tenant``, ``--db``) to a Python caller (stop 57, h5)."""
    from mongoshift import api
    from mongoshift.errors import ConfigInvalidError

    two_migrations(tenant_project)
    with pytest.raises(ConfigInvalidError) as tenants:
        await api.status(tenant_project.settings())
    assert "(in Python: a *_across call with api.Tenants(...), or load_settings({'db': ...}))" in tenants.value.message
    alone = tenant_project.settings().model_copy(update={"tenants": None})
    with pytest.raises(ConfigInvalidError) as one:
        await api.status(alone)
    assert "mongoshift.toml (in Python: load_settings({'db': ...}))" in one.value.message


async def test_the_api_runs_any_session_call_per_tenant(tenant_project: TenantProject) -> None:
    two_migrations(tenant_project)
    report = await across_tenants(
        tenant_project.settings(), lambda ms: ms.status(), Tenants(names=[tenant_project.tenants[1]]), command="status"
    )
    assert [r.name for r in report.rows] == [tenant_project.tenants[1]]
    assert [row.state for row in report.rows[0].result] == ["pending", "pending"]


def test_without_tenant_flags_nothing_changes(tenant_project: TenantProject, cli, sync_client: MongoClient, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    two_migrations(tenant_project)
    result = cli(tenant_project, "up", "--db", tenant_project.tenants[0], "--json")
    assert result.returncode == 0 and "results" in json.loads(result.stdout)
    assert counters(sync_client, tenant_project.tenants[0]) == {"0001": 1, "0002": 1}
    assert counters(sync_client, tenant_project.tenants[1]) == {}


HELD = """
import asyncio

use_transaction = True


async def up(ctx):
    if await ctx.db.hold.find_one({}) is not None:
        await ctx.db.reached.insert_one({"file": "0002"})  # outside the transaction: the test sees it
        while True:  # held here until the process is killed
            await asyncio.sleep(0.05)
    await ctx.db.counters.update_one({"_id": "0002"}, {"$inc": {"n": 1}}, upsert=True, session=ctx.session)
"""


def test_kill_9_in_the_middle_of_a_rollout_and_the_rerun_finishes_it(tenant_project: TenantProject, sync_client: MongoClient) -> None:
    tenant_project.add("0001_a.py", COUNTED.format(file="0001"))
    tenant_project.add("0002_b.py", HELD)
    t0, t1, t2, t3 = tenant_project.tenants
    sync_client[t1].hold.insert_one({})
    process = start_cli(tenant_project, "up", "--all-tenants", "--parallel", "1")  # type: ignore[arg-type]
    try:
        until = time.monotonic() + 120
        while sync_client[t1].reached.find_one() is None:  # the state the test waits for: t1 is inside 0002
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < until, "the rollout never reached the held migration"
            time.sleep(0.1)
    finally:
        process.send_signal(signal.SIGKILL)
        process.communicate()
    assert counters(sync_client, t0) == {"0001": 1, "0002": 1} and counters(sync_client, t2) == {}

    sync_client[t1].hold.drop()
    rerun = cli_process(tenant_project, "up", "--all-tenants", "--parallel", "2", "--json")  # type: ignore[arg-type]
    assert rerun.returncode == 0, rerun.stderr  # t1's lock, held by a process that is gone, is taken over at once
    outcomes = {r["name"]: r["outcome"] for r in json.loads(rerun.stdout)["tenants"]}
    assert outcomes == {t0: "already at target", t1: "done", t2: "done", t3: "done"}
    for name in tenant_project.tenants:  # each migration recorded applied once, its effect present once
        assert counters(sync_client, name) == {"0001": 1, "0002": 1} and applied(sync_client, name) == ["0001_a.py", "0002_b.py"]


def test_baseline_unlock_and_audit_across_tenants(tenant_project: TenantProject, cli, sync_client: MongoClient) -> None:  # type: ignore[no-untyped-def]
    two_migrations(tenant_project)
    baseline = cli(tenant_project, "baseline", "--to", "0001_a.py", "--yes", "--all-tenants", "--json")
    assert baseline.returncode == 0, baseline.stderr
    assert {(r["outcome"], r["applied"]) for r in rows(baseline).values()} == {("done", 1)}
    assert all(counters(sync_client, name) == {} and applied(sync_client, name) == ["0001_a.py"] for name in tenant_project.tenants)

    held = tenant_project.tenants[1]
    lock = {"_id": "migration_lock", "owner": "other", "nonce": "n", "host": "elsewhere", "pid": 1, "executed_by": "x", "ttl_ms": 600_000}
    sync_client[held]["_mongoshift_locks"].insert_one({**lock, "expires_at": datetime.now(UTC) + timedelta(minutes=10)})
    refused = cli(tenant_project, "unlock", "--all-tenants")
    assert refused.returncode == 42  # asked once for all, nobody to answer
    unlocked = cli(tenant_project, "unlock", "--all-tenants", "--yes", "--json")
    assert unlocked.returncode == 0
    assert {n: r["outcome"] for n, r in rows(unlocked).items()}[held] == "done"
    assert sum(1 for r in rows(unlocked).values() if r["outcome"] == "already at target") == 3

    audit = cli(tenant_project, "audit", "--all-tenants", "--json")
    assert audit.returncode == 47  # 0002 is pending everywhere: a warning (40) in each tenant
    assert {(r["exit_code"], r["error"]["kind"]) for r in rows(audit).values()} == {(40, "audit_warnings")}
    assert cli(tenant_project, "up", "--all-tenants").returncode == 0
    assert cli(tenant_project, "audit", "--all-tenants").returncode == 0


def test_up_whose_converge_changed_a_tenant_reports_it_done(tenant_project: TenantProject, cli, sync_client: MongoClient) -> None:  # type: ignore[no-untyped-def]
    """``up --converge --yes`` with nothing pending rebuilt an index in every tenant, and each row said "already at
    target" ("nothing to do"); a tenant whose converge changed nothing still says so."""
    two_migrations(tenant_project)
    assert cli(tenant_project, "up", "--all-tenants").returncode == 0
    (tenant_project.root / "collections").mkdir()
    (tenant_project.root / "collections" / "items.toml").write_text('indexes = [{ keys = { x = 1 }, name = "x_1", sparse = true }]\n')
    changed = tenant_project.tenants[0]
    sync_client[changed].items.create_index("x", name="x_1")  # not sparse: converge rebuilds it here only
    for name in tenant_project.tenants[1:]:
        sync_client[name].items.create_index("x", name="x_1", sparse=True)
    result = cli(tenant_project, "up", "--all-tenants", "--converge", "--yes", "--json")
    assert result.returncode == 0, result.stderr
    outcomes = {name: row["outcome"] for name, row in rows(result).items()}
    assert outcomes == {name: "done" if name == changed else "already at target" for name in tenant_project.tenants}
    assert sync_client[changed].items.index_information()["x_1"].get("sparse") is True


def test_lock_across_tenants_says_a_dead_holder_is_taken_over_as_for_one_database(tenant_project: TenantProject, cli, sync_client: MongoClient) -> None:  # type: ignore[no-untyped-def]
    """After a kill -9, ``lock --db T`` said the next run takes the lock over; the tenant's row only named its holder."""
    import socket
    import subprocess
    import sys

    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()  # a pid of this host that no longer runs
    held = tenant_project.tenants[1]
    lock = {"_id": "migration_lock", "owner": "killed", "nonce": "n", "host": socket.gethostname(), "pid": ended.pid, "executed_by": "x"}
    sync_client[held]["_mongoshift_locks"].insert_one({**lock, "ttl_ms": 600_000, "expires_at": datetime.now(UTC) + timedelta(minutes=10)})
    alone = cli(tenant_project, "lock", "--db", held)
    assert alone.stdout.strip().endswith("that process no longer runs on this host: the next run takes it over"), alone.stdout
    across = cli(tenant_project, "lock", "--all-tenants")
    assert across.returncode == 0, across.stderr
    holders = across.stdout.split("lock across tenants")[0]  # the holders' table, before the rollout's report
    [row] = [line.split("\t") for line in holders.splitlines() if line.startswith(held + "\t")]
    assert "held by " + row[1] == alone.stdout.strip(), across.stdout


def test_lock_json_says_a_dead_holder_is_gone_as_the_text_does(tenant_project: TenantProject, cli, sync_client: MongoClient) -> None:  # type: ignore[no-untyped-def]
    """``lock --json`` had the holder's fields only: "that process no longer runs" was in the text alone."""
    import os
    import socket
    import subprocess
    import sys

    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()  # a pid of this host that no longer runs
    held = tenant_project.tenants[1]
    lock = {"_id": "migration_lock", "owner": "killed", "nonce": "n", "host": socket.gethostname(), "pid": ended.pid, "executed_by": "x"}
    locks = sync_client[held]["_mongoshift_locks"]
    locks.insert_one({**lock, "ttl_ms": 600_000, "expires_at": datetime.now(UTC) + timedelta(minutes=10)})
    alone = json.loads(cli(tenant_project, "lock", "--db", held, "--json").stdout)
    assert alone["held"] and alone["holder"]["gone"] is True and alone["holder"]["expired"] is False
    across = cli(tenant_project, "lock", "--all-tenants", "--json")
    assert across.returncode == 0, across.stderr
    assert rows(across)[held]["result"]["holder"]["gone"] is True, across.stdout
    locks.update_one({"_id": "migration_lock"}, {"$set": {"pid": os.getpid()}})  # a live process
    assert json.loads(cli(tenant_project, "lock", "--db", held, "--json").stdout)["holder"]["gone"] is False


async def test_with_wait_a_locked_tenant_is_waited_for(tenant_project: TenantProject, sync_client: MongoClient) -> None:
    from mongoshift.api.options import Lock

    two_migrations(tenant_project)
    held = tenant_project.tenants[2]
    lock = {"_id": "migration_lock", "owner": "other", "nonce": "n", "host": "elsewhere", "pid": 1, "executed_by": "x", "ttl_ms": 600_000}
    sync_client[held]["_mongoshift_locks"].insert_one({**lock, "expires_at": datetime.now(UTC) + timedelta(minutes=10)})

    def release_when_waited(event: Event) -> None:  # the other run ends once this one is seen waiting for it
        if event.kind == "lock_waited" and event.data.get("tenant") == held:
            sync_client[held]["_mongoshift_locks"].delete_one({"owner": "other"})

    report = await up_across(tenant_project.settings(), Tenants(all=True), lock=Lock(wait=300), observers=[release_when_waited])
    assert report.ok and {row.name: row.outcome for row in report.rows}[held] == "done"
    assert counters(sync_client, held) == {"0001": 1, "0002": 1}


SEED = """
def up(ctx):
    ctx.db.users.insert_many([{"_id": i, "first": f"Ada{i}", "last": "Lovelace", "__v": 1, "__rev": 1} for i in range(30)])
    ctx.db.users.create_index([("__v", 1), ("_id", 1)])
"""

FULL_NAMES = """
from mongoshift import Background


def migrate(doc, ctx):
    doc["name"] = f"{doc.pop('first')} {doc.pop('last')}"
    return doc


background = Background(collection="users", from_version=1, to_version=2, migrate=migrate, batch_size=10)
"""


def test_one_background_run_serves_every_tenant(tenant_project: TenantProject, cli, sync_client: MongoClient) -> None:  # type: ignore[no-untyped-def]
    tenant_project.add("0001_seed.py", SEED)
    tenant_project.add("0002_full_names.py", FULL_NAMES)
    registered = cli(tenant_project, "up", "--all-tenants", "--json")
    assert registered.returncode == 0
    # the hints name a command that runs here (the bare one answered "no database given")
    for name, row in rows(registered).items():
        note = row["result"]["results"][-1]["reason"]
        every = "'mongoshift background run 0002_full_names --all-tenants'"
        assert note == f"registered: run it with 'mongoshift background run 0002_full_names --db {name}' (or {every})"
    behind = cli(tenant_project, "status", "--all-tenants", "--check", "--json")
    assert behind.returncode == 47
    assert all("'mongoshift background run 0002_full_names --all-tenants'" in r["error"]["message"] for r in rows(behind).values())
    refused = cli(tenant_project, "background", "run", "--all", "--all-tenants", "--parallel", "2")
    assert refused.returncode == 46 and "use --concurrency" in refused.stderr
    result = cli(tenant_project, "background", "run", "--all", "--all-tenants", "--concurrency", "2", "--json")
    assert result.returncode == 0, result.stderr
    by_name = rows(result)
    assert {r["outcome"] for r in by_name.values()} == {"done"}
    assert all([m["status"] for m in r["result"]] == ["completed"] for r in by_name.values())
    for name in tenant_project.tenants:
        assert sync_client[name].users.count_documents({"__v": 2, "name": {"$exists": True}}) == 30
    status = cli(tenant_project, "background", "status", "--all-tenants", "--check", "--json")
    assert status.returncode == 0 and all(r["result"][0]["status"] == "completed" for r in rows(status).values())
    again = cli(tenant_project, "background", "run", "--all", "--all-tenants", "--json")
    assert again.returncode == 0 and {r["outcome"] for r in rows(again).values()} == {"already at target"}


POLITE = """
import asyncio


async def up(ctx):
    if await ctx.db.hold.find_one({}) is not None:
        await ctx.db.reached.insert_one({"file": "0002"})
        while not ctx.cancelled.is_set():  # a long migration that looks at the signal
            await asyncio.sleep(0.05)
        return
    await ctx.db.counters.update_one({"_id": "0002"}, {"$inc": {"n": 1}}, upsert=True)
"""


def test_ctrl_c_stops_scheduling_and_the_running_tenant_ends_cleanly(tenant_project: TenantProject, sync_client: MongoClient) -> None:
    tenant_project.add("0001_a.py", COUNTED.format(file="0001"))
    tenant_project.add("0002_b.py", POLITE)
    t0, t1, t2, t3 = tenant_project.tenants
    sync_client[t1].hold.insert_one({})
    process = start_cli(tenant_project, "up", "--all-tenants", "--parallel", "1", "--json")  # type: ignore[arg-type]
    until = time.monotonic() + 120
    while sync_client[t1].reached.find_one() is None:  # t1 is inside 0002
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < until, "the rollout never reached the migration"
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 11, err
    document = json.loads(out)
    outcomes = {r["name"]: r["outcome"] for r in document["tenants"]}
    assert outcomes == {t0: "done", t1: "cancelled", t2: "not reached", t3: "not reached"}
    assert document["exit_code"] == 11 and "interrupted by SIGINT" in document["stopped"]
    assert applied(sync_client, t1) == ["0001_a.py"]  # the migration that saw the signal is not recorded applied
    # what the stopped tenant did apply is counted (it said 0)
    assert {r["name"]: r["applied"] for r in document["tenants"] if r["name"] in (t0, t1)} == {t0: 2, t1: 1}
    assert sync_client[t1]["_mongoshift_locks"].count_documents({}) == 0  # its lock released: it ended cleanly
    assert sync_client.list_database_names().count(t2) == 0


@pytest.mark.parametrize(("kind", "command"), [("def", "up"), ("async def", "up"), ("def", "background watch")])
def test_ctrl_c_while_the_provider_runs_stops_at_once(tenant_project: TenantProject, sync_client: MongoClient, kind: str, command: str) -> None:
    """A provider reads the tenants from a control database that may be slow to answer: Ctrl-C then waited for it
    to return (a stuck one, for ever), saying running tenants would stop at their boundary when none ran yet.
    It stops at once: exit 11, one JSON document, no tenant touched."""
    two_migrations(tenant_project)
    wait = "await asyncio.sleep(3600)" if kind == "async def" else "time.sleep(3600)"
    use_provider(tenant_project, "slow_tenants:tenants", (
        "import asyncio, sys, time\n"
        f"{kind} tenants(settings):\n"
        "    print('provider started', file=sys.stderr, flush=True)\n"
        f"    {wait}\n"
        f"    return {tenant_project.tenants!r}\n"
    ))
    process = start_cli(tenant_project, *command.split(), "--all-tenants", "--json")  # watch: the stop was lost, its watchers ran on
    with reaped(process):
        assert process.stderr is not None
        while "provider started" not in (line := process.stderr.readline()):
            assert line, process.communicate()
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    assert process.returncode == 11, (out, err)
    error = json.loads(out)["error"]
    assert error["kind"] == "aborted" and "interrupted by SIGINT" in error["message"] and "no tenant ran" in error["message"], error
    assert "Traceback" not in err
    assert not [name for name in sync_client.list_database_names() if name.startswith(tenant_project.prefix)]


def test_list_and_background_status_across_tenants_show_what_they_list(tenant_project, cli) -> None:  # type: ignore[no-untyped-def]
    """The human views list what the command lists (``list``'s rows were only in ``--json``), and say when there is
    nothing (a table of headers alone before)."""
    tenant_project.write_config()
    two_migrations(tenant_project)
    assert cli(tenant_project, "up", "--tenant", tenant_project.tenants[0]).returncode == 0
    listed = cli(tenant_project, "list", "--all-tenants")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[:2] == ["migrations by tenant", "tenant\tmigration\tstate\tbatch\tapplied at\tchecksum"], lines
    rows = [line.split("\t")[:3] for line in lines[2:10]]
    assert rows[:2] == [[tenant_project.tenants[0], "0001_a.py", "applied"], [tenant_project.tenants[0], "0002_b.py", "applied"]]
    assert rows[2:8] == [[t, f, "pending"] for t in tenant_project.tenants[1:] for f in ("0001_a.py", "0002_b.py")]
    alone = cli(tenant_project, "list", "--applied", "--tenant", tenant_project.tenants[1])
    assert alone.stdout.startswith("no applied migrations in the selected tenants\n"), alone.stdout
    audited = cli(tenant_project, "audit", "--all-tenants")  # the findings too, not only each tenant's count of them
    assert audited.returncode == 47 and audited.stdout.startswith("findings by tenant\ntenant\tseverity\tcheck\tsubject\tmessage\n"), audited.stdout
    assert f"{tenant_project.tenants[1]}\twarn\tline.pending\t0001_a.py\t" in audited.stdout
    nothing = cli(tenant_project, "background", "status", "--all-tenants")
    assert nothing.stdout.startswith("no background migrations registered in the selected tenants\n"), nothing.stdout
    assert "tenant\tmigration\tstate" not in nothing.stdout


def test_down_of_an_irreversible_file_across_tenants_is_refused_once_before_any_tenant(tenant_project: TenantProject, cli, sync_client: MongoClient) -> None:  # type: ignore[no-untyped-def]
    """It was refused tenant by tenant (a rollout that ran, each row failed with 13, or stopped at the first);
    a file without down(ctx) cannot be rolled back anywhere, so it is refused once, exit 13, no tenant started."""
    two_migrations(tenant_project)
    tenant_project.add("0003_c.py", "def up(ctx):\n    ctx.db.counters.update_one({'_id': '0003'}, {'$inc': {'n': 1}}, upsert=True)\n")
    assert cli(tenant_project, "up", "--all-tenants").returncode == 0
    for command in ("down", "redo"):
        result = cli(tenant_project, command, "0003_c.py", "--all-tenants", "--continue-on-error", "--json")
        assert result.returncode == 13, (command, result.stdout, result.stderr)
        document = json.loads(result.stdout)
        assert "tenants" not in document and "0003_c.py has no down(ctx)" in json.dumps(document), document
    for name in tenant_project.tenants:
        assert applied(sync_client, name) == ["0001_a.py", "0002_b.py", "0003_c.py"]
        assert counters(sync_client, name) == {"0001": 1, "0002": 1, "0003": 1}
    # a reversible file still rolls back across tenants
    assert cli(tenant_project, "down", "0002_b.py", "--all-tenants").returncode == 0


async def test_down_across_of_an_irreversible_file_raises_before_any_tenant_starts(tenant_project: TenantProject, cli) -> None:  # type: ignore[no-untyped-def]
    from mongoshift.api.tenants import down_across
    from mongoshift.errors import IrreversibleMigrationError

    tenant_project.add("0001_a.py", "def up(ctx):\n    pass\n")
    assert cli(tenant_project, "up", "--all-tenants").returncode == 0
    events: list[Event] = []
    with pytest.raises(IrreversibleMigrationError):
        await down_across(tenant_project.settings(), Tenants(all=True, continue_on_error=True), target="0001_a", observers=[events.append])
    assert [e for e in events if e.kind == "tenant_start"] == []
