"""A squash file meets ``import``, ``baseline`` and tenant databases."""

from __future__ import annotations

import datetime
import json

from pymongo import MongoClient

from mongoshift.api.adoption import baseline, import_history
from mongoshift.api.hygiene import squash
from mongoshift.api.migrations import status, up

from ..tenants.conftest import TenantProject
from .test_squash import MARK, line, marks


async def test_baseline_records_the_squashed_files_and_the_line_counts_the_squash_applied(project, sync_client, db_name) -> None:  # type: ignore[no-untyped-def]
    line(project, "0001_a", "0002_b", "0003_c")
    await up(project.settings())
    await squash(project.settings(), "0002_b")
    sync_client.drop_database(db_name)

    report = await baseline(project.settings(), "0002_squashed")
    assert [r.name for r in report.adopted] == ["0001_a.py", "0002_b.py"]  # what the databases that ran them have
    rows = await status(project.settings())
    assert [(r.name, r.shown_state, r.checksum) for r in rows] == [
        ("0002_squashed.py", "applied (squashed files applied)", "ok"), ("0003_c.py", "pending", None)
    ]
    assert [r.name for r in (await up(project.settings())).results] == ["0003_c.py"]
    assert marks(sync_client, project) == ["0003_c"]


async def test_import_matches_the_files_a_squash_archived(project, sync_client, db_name) -> None:  # type: ignore[no-untyped-def]
    names = ["20240101000000_a", "20240102000000_b", "20240103000000_c"]
    line(project, *names)
    await up(project.settings())
    await squash(project.settings(), names[1])
    sync_client.drop_database(db_name)
    when = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    sync_client[project.db].pymongo_migrate.insert_many([{"name": name, "applied": when} for name in names[:2]])

    report = await import_history(project.settings(), "pymongo-migrate")
    assert [r.name for r in report.adopted] == ["20240101000000_a.py", "20240102000000_b.py"]
    assert [(r.name, r.state) for r in await status(project.settings())] == [
        ("20240102000000_squashed.py", "applied"), ("20240103000000_c.py", "pending")
    ]


def test_squash_across_tenants_judges_every_tenant_first(tenant_project: TenantProject, cli, sync_client: MongoClient) -> None:  # type: ignore[no-untyped-def]
    project = tenant_project
    for name in ("0001_a", "0002_b", "0003_c"):
        project.add(f"{name}.py", MARK.format(name=name))
    first, *rest = project.tenants
    assert cli(project, "up", "--to", "0002_b", *(arg for t in rest for arg in ("--tenant", t))).returncode == 0
    assert cli(project, "up", "--to", "0001_a", "--tenant", first).returncode == 0

    behind = cli(project, "squash", "--to", "0002_b", "--all-tenants", "--yes", "--json")
    assert behind.returncode == 47
    rows = {row["name"]: row for row in json.loads(behind.stdout)["tenants"]}
    assert rows[first]["error"]["kind"] == "squash_refused" and rows[first]["exit_code"] == 50
    assert "not applied in this database: 0002_b.py" in rows[first]["error"]["message"]
    assert all(rows[t]["exit_code"] == 0 for t in rest)
    assert not (project.migrations / "_squashed").exists()  # nothing written while one tenant is behind

    assert cli(project, "up", "--to", "0002_b", "--tenant", first).returncode == 0
    written = cli(project, "squash", "--to", "0002_b", "--all-tenants", "--yes", "--json")
    assert written.returncode == 0, written.stdout
    assert json.loads(written.stdout)["tenants"] == len(project.tenants)

    sync_client.drop_database(first)  # a new tenant database: it runs the squash file
    sync_client[rest[0]]["_mongoshift_migrations"].delete_one({"name": "0002_b.py"})  # a tenant left in between
    rolled = cli(project, "up", "--all-tenants", "--continue-on-error", "--json")
    assert rolled.returncode == 47
    rows = {row["name"]: row for row in json.loads(rolled.stdout)["tenants"]}
    assert rows[rest[0]]["exit_code"] == 50 and "in between squash 0002_squashed.py" in rows[rest[0]]["error"]["message"]
    assert all(rows[t]["exit_code"] == 0 for t in (first, *rest[1:]))
    assert [d["file"] for d in sync_client[first].marks.find(sort=[("_id", 1)])] == ["0001_a", "0002_b", "0003_c"]
    counts = {c["migration"]: c for c in json.loads(cli(project, "status", "--all-tenants", "--json").stdout)["migrations"]}
    # the tenant left in between counts the squash pending, as its own status does (partial)
    assert counts["0002_squashed.py"]["applied"] == len(project.tenants) - 1 and counts["0002_squashed.py"]["pending"] == 1


def test_a_range_the_files_refuse_is_refused_once_before_any_tenant(tenant_project: TenantProject, cli, sync_client: MongoClient) -> None:  # type: ignore[no-untyped-def]
    """A squash the files themselves refuse (one file, a background migration in the range) was judged tenant by tenant:
    the same refusal in every row, exit 47. It is refused once, with the single database's code (50), no tenant read."""
    project = tenant_project
    for name in ("0001_a", "0002_b"):
        project.add(f"{name}.py", MARK.format(name=name))
    project.write_config(databases=project.tenants)
    for to, said in (("0001_a", "nothing to squash: 0001_a.py is the first file of the line"), ("0002_b", "named by requires: 0001_a.py")):
        if to == "0002_b":
            project.add("0003_c.py", MARK.format(name="0003_c") + "requires = ['0001_a']\n")
        refused = cli(project, "squash", "--to", to, "--all-tenants", "--dry-run", "--json")
        assert refused.returncode == 50, (refused.stdout, refused.stderr)
        document = json.loads(refused.stdout)
        assert "tenants" not in document and document["error"]["kind"] == "squash_refused", document
        assert said in document["error"]["message"], document
        assert "tenant" not in refused.stderr, refused.stderr  # no tenant was read: no progress line
    assert not [name for name in sync_client.list_database_names() if name.startswith(project.prefix)]


PROVIDER = '''
import pathlib
import time

_here = pathlib.Path(__file__).parent


def tenants(settings):
    (_here / "selecting").write_text("")
    for _ in range(2400):  # until the test has sent its signal (at most two minutes)
        if (_here / "go").exists():
            break
        time.sleep(0.05)
    return {names}
'''


def test_ctrl_c_while_tenants_are_judged_writes_no_squash(tenant_project: TenantProject, cli) -> None:  # type: ignore[no-untyped-def]
    """``squash --all-tenants`` went on judging after Ctrl-C, wrote the squash file and exited 0."""
    from ..conftest import interrupt_at, start_cli

    project = tenant_project
    for name in ("0001_a", "0002_b"):
        project.add(f"{name}.py", MARK.format(name=name))
    assert cli(project, "up", "--all-tenants").returncode == 0
    (project.root / "provided.py").write_text(PROVIDER.format(names=project.tenants))
    project.write_config(provider="provided:tenants")
    before = sorted(p.name for p in project.migrations.iterdir())
    process = start_cli(project, "squash", "--to", "0002_b", "--all-tenants", "--yes")
    stderr = interrupt_at(process, project.root / "selecting", project.root / "go")
    assert process.returncode == 11, stderr
    assert sorted(p.name for p in project.migrations.iterdir()) == before  # no squash file, no archive
