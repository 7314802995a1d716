"""``mongoshift converge`` and ``up --converge`` as a user runs them: real processes, exit codes, JSON."""

from __future__ import annotations

import json
import textwrap

from ..cli.test_cli import QUICK

USERS = """
[[mongoshift.collections]]
name = "users"
validator = false
indexes = [
  { keys = { email = 1 }, name = "by_email", unique = true },
  { keys = { seen = 1 }, expireAfterSeconds = 3600 },
]
"""


def declare(project, text: str = USERS, **settings: object) -> None:  # type: ignore[no-untyped-def]
    project.write_config(**settings)
    with project.config.open("a", encoding="utf-8") as f:
        f.write(textwrap.dedent(text))


def test_check_dry_run_and_apply(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    declare(project)
    db = sync_client[project.db]

    result = cli(project, "converge", "--check", "--json")
    assert result.returncode == 28, result.stderr
    document = json.loads(result.stdout)
    assert document["in_sync"] is False and document["mode"] == "check"
    assert {(a["target"], a["name"], a["action"], a["status"]) for a in document["actions"]} == {
        ("collection", None, "create", "planned"),
        ("index", "by_email", "create", "planned"),
        ("index", "seen_1", "create", "planned"),
    }

    result = cli(project, "converge", "--dry-run")
    assert result.returncode == 0 and "dry run: nothing was written" in result.stdout and "by_email" in result.stdout
    assert db.list_collection_names() == []  # not even the converge log or the lock

    result = cli(project, "converge", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["success"] and document["changed"] and document["summary"] == {"create": 3}
    assert db.users.index_information()["by_email"]["unique"] is True
    assert db["_mongoshift_converge"].count_documents({"success": True}) == 1

    result = cli(project, "converge", "--check")
    assert result.returncode == 0 and "in sync: 1 collection," in result.stdout
    result = cli(project, "converge", "--json")
    assert result.returncode == 0 and json.loads(result.stdout)["changed"] is False


def test_destructive_plan_needs_yes_with_json(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    db = sync_client[project.db]
    db.users.create_index("email", name="by_email")  # declared unique: collMod, or a rebuild where the server refuses it
    db.users.create_index("stray", name="stray_1")
    declare(project)

    result = cli(project, "converge", "--prune", "--json")
    assert result.returncode == 42, result.stderr
    error = json.loads(result.stdout)["error"]
    assert error["kind"] == "confirmation_required" and "--yes" in error["message"] and "users: drop index stray_1" in error["message"]
    assert "stray_1" in db.users.index_information() and "seen_1" not in db.users.index_information()
    plain = cli(project, "converge", "--prune")  # no terminal: refused as well, with the steps it would have taken
    assert plain.returncode == 42 and "stray_1" in plain.stdout and "planned" in plain.stdout

    result = cli(project, "converge", "--prune", "--json", "--yes")
    assert result.returncode == 0, result.stdout + result.stderr
    indexes = db.users.index_information()
    assert "stray_1" not in indexes and indexes["by_email"]["unique"] is True and "_id_" in indexes

    declare(project, '[[mongoshift.collections]]\nname = "users"\nindexes = []\nprune = true\n')
    empty = cli(project, "converge")  # the plan's warning, as --dry-run and --yes give it, also when it is refused
    assert empty.returncode == 42 and "indexes = [] with prune drops every index but _id_" in empty.stderr, empty.stderr


def test_conflict_exits_27_with_the_plan(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    sync_client[project.db].users.create_index([("email", 1), ("tenant", 1)], name="by_email")
    declare(project)
    result = cli(project, "converge", "--json", "--yes")
    assert result.returncode == 27
    error = json.loads(result.stdout)["error"]
    assert error["kind"] == "converge_failed" and "conflict" in error["message"]
    rows = error["details"]["converge"]["actions"]
    assert [(r["name"], r["status"]) for r in rows if r["action"] == "conflict"] == [("by_email", "refused")]
    assert "seen_1" not in sync_client[project.db].users.index_information()

    result = cli(project, "converge", "--dry-run")
    assert result.returncode == 27 and "conflict" in result.stdout
    both = cli(project, "converge", "--dry-run", "--check", "--json")
    assert both.returncode == 6 and "cannot be combined" in json.loads(both.stdout)["error"]["message"]
    dry = cli(project, "converge", "--dry-run", "--json")
    document = json.loads(dry.stdout)
    assert dry.returncode == 27 and document["success"] is False and "conflict index by_email" in document["error"]


def test_invalid_declaration_exits_6_naming_key_and_file(project, cli) -> None:  # type: ignore[no-untyped-def]
    declare(project, USERS.replace("unique = true", "uniqe = true"))
    result = cli(project, "converge", "--json")
    assert result.returncode == 6
    message = json.loads(result.stdout)["error"]["message"]
    assert "uniqe" in message and "did you mean 'unique'" in message and "mongoshift.toml" in message

    declare(project, "")
    (project.root / "collections").mkdir()
    (project.root / "collections" / "orders.toml").write_text("indexes = [{ keys = { at = 1 }, expireAfterSecs = 5 }]\n")
    result = cli(project, "converge")
    assert result.returncode == 6 and "orders.toml: indexes[0]: unknown key 'expireAfterSecs'" in result.stderr


def test_folder_declarations_apply(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    declare(project, "")
    folder = project.root / "collections"
    folder.mkdir()
    (folder / "orders.py").write_text('collection = {"indexes": [{"keys": {"customer": 1, "at": -1}}], "validator": None}\n')
    result = cli(project, "converge", "--json")
    assert result.returncode == 0, result.stderr
    assert "customer_1_at_-1" in sync_client[project.db].orders.index_information()


def test_bulk_up_ends_with_a_converge(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", QUICK)
    project.add("0002_b.py", QUICK)
    declare(project, converge_after_up=True)
    db = sync_client[project.db]

    result = cli(project, "up", "0001_a.py", "--converge")
    assert result.returncode == 6 and "bulk up" in result.stderr
    result = cli(project, "up", "--to", "0001_a.py", "--json")  # --to: never a converge
    assert result.returncode == 0 and "converge" not in json.loads(result.stdout)
    assert "users" not in db.list_collection_names()
    result = cli(project, "up", "--no-converge", "--json")
    assert result.returncode == 0 and "converge" not in json.loads(result.stdout)

    result = cli(project, "up", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["results"] == [] and document["converge"]["trigger"] == "up" and document["converge"]["changed"]
    assert "by_email" in db.users.index_information()
    entry = db["_mongoshift_converge"].find_one()
    assert entry is not None and entry["trigger"] == "up" and entry["run_id"] == document["run_id"]


def test_a_bulk_up_whose_converge_is_refused_shows_the_migrations_it_applied(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """The error alone ('converge refused, nothing was changed') read as if the migrations had not run either."""
    project.add("0001_a.py", QUICK)
    sync_client[project.db].users.create_index([("email", 1), ("tenant", 1)], name="by_email")  # a conflict
    declare(project)
    result = cli(project, "up", "--converge")
    assert result.returncode == 27, result.stderr
    assert "0001_a.py\tup\tapplied" in result.stdout and "by_email\tconflict\trefused" in result.stdout, result.stdout
    document = json.loads(cli(project, "status", "--json").stdout)
    assert [m["state"] for m in document["migrations"]] == ["applied"]


def test_a_bulk_up_preview_says_its_converge_is_not_previewed(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", QUICK)
    declare(project, converge_after_up=True)
    result = cli(project, "dry-run", "up", "--json")
    assert result.returncode == 0, result.stderr
    [note] = json.loads(result.stdout)["warnings"]
    assert "converge_after_up" in note and "mongoshift converge --dry-run" in note
    assert "converge" in cli(project, "dry-run", "up").stderr
    # up FILE and up --to never converge: nothing to point at
    assert json.loads(cli(project, "dry-run", "up", "--to", "0001_a.py", "--json").stdout)["warnings"] == []
    assert json.loads(cli(project, "dry-run", "up", "0001_a.py", "--json").stdout)["warnings"] == []


def test_up_with_a_bad_declaration_runs_no_migration(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", QUICK)
    declare(project, "")
    (project.root / "collections").mkdir()
    (project.root / "collections" / "users.toml").write_text("indexes = [{ keys = { a = 3 } }]\n")
    result = cli(project, "up", "--converge")
    assert result.returncode == 6 and "users.toml" in result.stderr
    assert sync_client[project.db]["_mongoshift_migrations"].count_documents({}) == 0


def test_converge_without_the_lock_warns_once(project, cli) -> None:  # type: ignore[no-untyped-def]
    declare(project)
    result = cli(project, "converge", "--no-lock", "--yes")
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("without the migration lock") == 1, result.stderr
    assert "without the migration lock" not in cli(project, "converge", "--yes").stderr


def test_reason_is_recorded_in_the_converge_log(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    declare(project, executed_by="deployer")
    result = cli(project, "converge", "--reason", "ticket OPS-12: email lookups", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["reason"] == "ticket OPS-12: email lookups"
    entry = sync_client[project.db]["_mongoshift_converge"].find_one()
    assert entry is not None and entry["reason"] == "ticket OPS-12: email lookups" and entry["requested_by"] == "deployer"

    result = cli(project, "converge", "--reason", "z" * 600)
    assert result.returncode == 6 and "reason" in result.stderr and "512" in result.stderr
    for mode in ("--dry-run", "--check"):  # refused the same where nothing is recorded
        assert cli(project, "converge", mode, "--reason", "z" * 600).returncode == 6
        assert cli(project, "converge", mode, "--reason", " ").returncode == 6


def test_a_step_that_still_differs_after_converge_is_said_once(project, cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The re-read after converge finds the collection as before (a server that ignored the steps): one warning a line."""
    from mongoshift.converge import orchestrator

    declare(project)
    real = orchestrator.inspect_all
    states: dict[str, object] = {}

    async def before_the_steps(db, declarations, *, probe: bool = True, check_stop=None, violations: bool = False):  # type: ignore[no-untyped-def]
        if not states:
            states.update(await real(db, declarations, probe=probe, check_stop=check_stop, violations=violations))
        return states

    monkeypatch.setattr(orchestrator, "inspect_all", before_the_steps)
    result = cli(project, "converge", "--yes")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "still differs after converge" in line]
    assert len(lines) == 3 and len({line.split("still differs after converge: ")[1] for line in lines}) == 3


def test_check_with_prune_counts_an_undeclared_index_as_a_difference(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    declare(project)
    assert cli(project, "converge", "--yes").returncode == 0
    sync_client[project.db].users.create_index("stray", name="stray_1")
    assert cli(project, "converge", "--check").returncode == 0
    pruned = cli(project, "converge", "--check", "--prune", "--json")
    assert pruned.returncode == 28 and [a["name"] for a in json.loads(pruned.stdout)["actions"] if a["action"] == "drop"] == ["stray_1"]



def test_in_sync_counts_every_declared_collection(project, cli) -> None:  # type: ignore[no-untyped-def]
    """A collection declared with nothing to manage has no action row: it was left out of the count."""
    declare(project, USERS + '\n[[mongoshift.collections]]\nname = "empty"\nindexes = []\nprune = true\n')
    assert cli(project, "converge", "--yes").returncode == 0
    result = cli(project, "converge", "--check")
    assert result.returncode == 0 and "in sync: 2 collections," in result.stdout, result.stdout


def test_in_sync_counts_collections_and_items_in_their_number(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.write_config()
    result = cli(project, "converge", "--check")
    assert result.returncode == 0 and "in sync: 0 collections, 0 items as declared" in result.stdout, result.stdout
    one = '\n[[mongoshift.collections]]\nname = "users"\nvalidator = false\n'
    declare(project, one)
    assert cli(project, "converge").returncode == 0
    result = cli(project, "converge", "--check")
    assert result.returncode == 0 and "in sync: 1 collection, 1 item as declared" in result.stdout, result.stdout
    declare(project, one + one.replace("users", "orders"))
    result = cli(project, "converge", "--check")
    assert result.returncode == 28 and "1 difference from the declared collections" in result.stderr, result.stderr
    assert cli(project, "converge").returncode == 0
    result = cli(project, "converge", "--check")
    assert result.returncode == 0 and "in sync: 2 collections, 2 items as declared" in result.stdout, result.stdout


def test_versioning_alone_over_a_legacy_validator_warns_that_its_rules_go(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """The validator is managed once versioning is declared: the server's own rules are replaced, and the plan warns."""
    sync_client[project.db].create_collection("accounts", validator={"email": {"$type": "string"}})
    declare(project, '[[mongoshift.collections]]\nname = "accounts"\nversioning = { current = 1, min = 0 }\n')
    result = cli(project, "converge", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "warning: accounts: modify validator (replace the validator by the versioning rules alone" in result.stderr, result.stderr


def test_converge_across_tenants_counts_what_it_applied_not_the_kept_indexes(tenant_project, cli, sync_client) -> None:  # type: ignore[no-untyped-def]
    """A tenant whose only rows were undeclared indexes *kept* was reported "done", with every kept index counted as
    applied; it has nothing to do: "already at target", 0 applied."""
    tenant_project.write_config()
    (tenant_project.root / "collections").mkdir()
    (tenant_project.root / "collections" / "items.toml").write_text('indexes = [{ keys = { x = 1 }, name = "x_1" }]\n')
    changed, *rest = tenant_project.tenants
    for name in rest:
        sync_client[name].items.create_index("x", name="x_1")
        sync_client[name].items.create_index("legacy", name="legacy_1")  # undeclared: kept without --prune
    result = cli(tenant_project, "converge", "--all-tenants", "--json")
    assert result.returncode == 0, result.stderr
    tenants = {row["name"]: row for row in json.loads(result.stdout)["tenants"]}
    assert {n: (r["outcome"], r["applied"]) for n, r in tenants.items()} == {
        n: ("done", 2) if n == changed else ("already at target", 0) for n in tenant_project.tenants
    }
    dry = cli(tenant_project, "converge", "--all-tenants", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert {r["outcome"] for r in json.loads(dry.stdout)["tenants"]} == {"already at target"}


def test_ctrl_c_at_the_destructive_prompt_stops_at_once_with_nothing_changed(project, sync_client) -> None:  # type: ignore[no-untyped-def]
    """Ctrl-C at "Drop or rebuild ...? [y/N]" said "stopping" and went on waiting for an answer; a second Ctrl-C then
    ended it (130) with the lock left held. It is a "no" at once: exit 11, nothing changed, the lock released."""
    import os
    import pty
    import select
    import signal
    import subprocess
    import sys

    from ..conftest import cli_env

    db = sync_client[project.db]
    db.users.create_index("seen", name="seen_1")  # undeclared: pruned, so the plan asks first
    declare(project, '[[mongoshift.collections]]\nname = "users"\nindexes = []\nprune = true\n')
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "mongoshift", "converge"], cwd=project.root, env={**cli_env(), "TERM": "dumb", "COLUMNS": "200"},
        stdin=follower, stdout=follower, stderr=follower,
    )
    os.close(follower)
    seen = b""
    try:
        while b"[y/N]" not in seen:  # the question is on the terminal: the run waits for the answer
            ready, _, _ = select.select([leader], [], [], 120)
            assert ready and process.poll() is None, seen.decode(errors="replace")
            seen += os.read(leader, 65536)
        process.send_signal(signal.SIGINT)
        while True:
            ready, _, _ = select.select([leader], [], [], 120)
            assert ready, "still waiting at the prompt after Ctrl-C: " + seen.decode(errors="replace")
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the process is gone: its terminal closed
                break
            if not chunk:
                break
            seen += chunk
        code = process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
        os.close(leader)
    text = seen.decode(errors="replace")
    assert code == 11, text
    assert "cancelled at the prompt: nothing was changed" in text, text
    assert "seen_1" in db.users.index_information()
    assert db["_mongoshift_locks"].count_documents({}) == 0  # released, not left for a takeover


def test_a_ctrl_c_after_the_report_adds_no_second_json_document(project, cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A Ctrl-C once the run had ended (its signal handler gone) but before the process exited appended an "aborted"
    error document after `converge --check --json`'s report: two documents, which no JSON parser reads."""
    from mongoshift.cli import converge as command

    declare(project)
    real = command.render

    def render_then_ctrl_c(report, **kwargs):  # type: ignore[no-untyped-def]
        real(report, **kwargs)
        raise KeyboardInterrupt  # the user's Ctrl-C, after the document was written

    monkeypatch.setattr(command, "render", render_then_ctrl_c)
    result = cli(project, "converge", "--check", "--json")
    assert result.returncode == 11, result.stderr
    document = json.loads(result.stdout)  # one document: the report
    assert document["mode"] == "check" and "aborted" in result.stderr


def test_the_prompt_names_what_the_destructive_steps_do() -> None:
    """A plan that only drops asked "Drop or rebuild 1 index? An index is missing while it rebuilds.": there is no
    rebuild, and no gap. The question names the steps it is about."""
    from mongoshift.cli.converge import question
    from mongoshift.converge.planner import Action

    drop = Action("audit", "index", "drop", "x_1")
    rebuild = Action("users", "index", "rebuild", "seen_1")
    assert question([drop]) == "Drop 1 index?"
    assert question([drop, drop]) == "Drop 2 indexes?"
    assert question([rebuild]) == "Rebuild 1 index? It is missing while it rebuilds."
    assert question([drop, rebuild]) == "Drop or rebuild 2 indexes? An index is missing while it rebuilds."
