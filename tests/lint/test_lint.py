"""``mongoshift lint``: each rule flags what it is for and leaves the safe form alone; suppressions need a reason."""

from __future__ import annotations

import json

import pytest

from mongoshift.api.hygiene import lint
from mongoshift.errors import DuplicateVersionError

# One risky file and its safe twin per rule: the rule must fire on the first and not on the second.
CASES = {
    "MS101": (
        "async def up(ctx):\n    await ctx.db.sessions.drop()\n    await ctx.db.users.drop_index('email_1')\n",
        "async def up(ctx):\n    await ctx.db.sessions.drop()\n\nasync def down(ctx):\n    await ctx.db.create_collection('sessions')\n",
    ),
    "MS102": (
        "async def up(ctx):\n    await ctx.db.users.update_many({'status': 'old'}, {'$set': {'status': 'new'}})\n",
        "async def up(ctx):\n    await ctx.db.users.update_many({'_id': {'$gte': 0, '$lt': 1000}, 'status': 'old'}, {'$set': {'status': 'new'}})\n"
        "    query = {'$and': [{'_id': {'$in': [1, 2]}}, {'x': 1}]}\n    await ctx.db['users'].delete_many(query)\n",
    ),
    "MS103": (
        "async def up(ctx):\n    await ctx.db.users.create_index('email', unique=True)\n",
        "async def up(ctx):\n"
        "    dups = await ctx.db.users.aggregate([{'$group': {'_id': '$email', 'n': {'$sum': 1}}}, {'$match': {'n': {'$gt': 1}}}]).to_list()\n"
        "    if dups:\n        raise RuntimeError('duplicate emails')\n    await ctx.db.users.create_index('email', unique=True)\n"
        "    await ctx.db.create_collection('tokens')\n    await ctx.db.tokens.create_index('value', unique=True)\n",
    ),
    "MS104": (
        "use_transaction = True\n\nasync def up(ctx):\n    await ctx.db.users.rename('people', session=ctx.session)\n",
        "use_transaction = True\n\nasync def up(ctx):\n    await ctx.db.users.update_one({'_id': 1}, {'$set': {'a': 1}}, session=ctx.session)\n",
    ),
    "MS105": (
        "from mongoshift import Background\n\ndef migrate(doc, ctx):\n    doc.pop('__v', None)\n    return doc\n\n"
        "background = Background(collection='users', from_version=0, to_version=1, migrate=migrate)\n",
        "from mongoshift import Background\n\ndef migrate(doc, ctx):\n    doc['full'] = doc.pop('first', '')\n    return doc\n\n"
        "background = Background(collection='users', from_version=0, to_version=1, migrate=migrate)\n",
    ),
}


@pytest.mark.parametrize("rule", sorted(CASES))
async def test_each_rule_flags_the_risky_form_and_not_the_safe_one(project, rule: str) -> None:  # type: ignore[no-untyped-def]
    risky, safe = CASES[rule]
    project.add("0001_risky.py", risky)
    project.add("0002_safe.py", safe)
    report = await lint(project.settings())
    assert report.files == ["0001_risky.py", "0002_safe.py"]
    assert {(f.file, f.rule) for f in report.findings} == {("0001_risky.py", rule)}, [f.message for f in report.findings]


async def test_the_findings_say_what_and_where(project) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", CASES["MS101"][0])
    project.add("0002_b.py", CASES["MS105"][0].replace("doc.pop('__v', None)\n    return doc", "return {'name': doc['name']}"))
    report = await lint(project.settings())
    assert [(f.file, f.line, f.collection) for f in report.findings] == [
        ("0001_a.py", 2, "sessions"), ("0001_a.py", 3, "users"), ("0002_b.py", 4, None)
    ]
    assert "drops collection sessions and the file has no down" in report.findings[0].message
    assert "drops index email_1 of users" in report.findings[1].message
    assert "returns a new document without the version field '__v'" in report.findings[2].message


async def test_the_project_default_transaction_counts(project) -> None:  # type: ignore[no-untyped-def]
    project.write_config(use_transaction=True)
    project.add("0001_a.py", "async def up(ctx):\n    await ctx.db.users.drop_indexes()\n\nasync def down(ctx):\n    pass\n")
    project.add("0002_b.py", "use_transaction = False\n\nasync def up(ctx):\n    await ctx.db.users.drop_indexes()\n\nasync def down(ctx):\n    pass\n")
    assert [(f.file, f.rule) for f in (await lint(project.settings())).findings] == [("0001_a.py", "MS104")]


async def test_suppressions_need_a_reason_and_a_known_rule(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", "# mongoshift-lint: allow drop-without-down -- sessions is a cache, rebuilt at start-up\n" + CASES["MS101"][0])
    project.add("0002_b.py", "# mongoshift-lint: allow MS102\n" + CASES["MS102"][0])
    project.add("0003_c.py", "# mongoshift-lint: allow MS999 -- a rule that does not exist\n# mongoshift-lint: allow MS103 -- stale, nothing to accept\n")
    result = cli(project, "lint", "--json")
    assert result.returncode == 51
    document = json.loads(result.stdout)
    assert [(f["file"], f["line"], f["rule"]) for f in document["findings"]] == [
        ("0002_b.py", 1, "MS100"), ("0002_b.py", 3, "MS102"), ("0003_c.py", 1, "MS100")
    ]
    assert [(f["file"], f["rule"], f["suppressed_by"]) for f in document["suppressed"]] == [
        ("0001_a.py", "MS101", "sessions is a cache, rebuilt at start-up"), ("0001_a.py", "MS101", "sessions is a cache, rebuilt at start-up")
    ]
    assert document["unused_suppressions"] == [{"file": "0003_c.py", "line": 2, "rules": ["MS103"]}]
    assert "gives no reason" in document["findings"][0]["message"]
    (project.migrations / "0002_b.py").write_text("# mongoshift-lint: allow MS102 -- short\n" + CASES["MS102"][0])
    short = json.loads(cli(project, "lint", "--json", "0002_b").stdout)["findings"][0]["message"]
    assert "gives too short a reason (at least" in short, short
    assert set(document["rules"]) == {"MS100", "MS101", "MS102", "MS103", "MS104", "MS105"}
    assert "migrate or revert" in document["rules"]["MS105"]["summary"]  # it checks both (it said "a background migrate")

    (project.migrations / "0002_b.py").write_text("# mongoshift-lint: allow MS102 -- users has forty rows, by contract\n" + CASES["MS102"][0])
    (project.migrations / "0003_c.py").unlink()
    clean = cli(project, "lint")
    assert clean.returncode == 0, clean.stdout
    assert "2 files: 0 findings, 3 accepted by a suppression comment" in clean.stdout


async def test_sizes_come_from_the_database(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    sync_client[project.db].users.insert_many([{"status": "old"} for _ in range(3)])
    project.add("0001_a.py", CASES["MS102"][0])
    (finding,) = (await lint(project.settings(), sizes=True)).findings
    assert finding.documents == 3 and "users holds about 3 documents here" in finding.message
    (unsized,) = (await lint(project.settings())).findings
    assert unsized.documents is None
    assert cli(project, "lint", "0001_a").returncode == 51


async def test_quiet_still_says_why_it_exits_51(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", CASES["MS102"][0])
    result = cli(project, "-q", "lint")
    assert result.returncode == 51 and result.stdout == "" and "1 file: 1 finding" in result.stderr
    project.add("0001_a.py", CASES["MS102"][1])
    assert tuple(cli(project, "-q", "lint")) == (0, "", "")


async def test_files_that_share_a_version_are_refused_before_any_lint(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", "async def up(ctx):\n    pass\n")
    project.add("00001_b.py", "async def up(ctx):\n    pass\n")
    with pytest.raises(DuplicateVersionError, match=r"00001_b\.py and 0001_a\.py"):
        await lint(project.settings())
    assert cli(project, "lint").returncode == 43


async def test_a_unique_index_model_counts_too(project) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", (
        "from pymongo import IndexModel\n\nasync def up(ctx):\n"
        "    await ctx.db.get_collection('users').create_indexes([IndexModel('email', unique=True), IndexModel('name')])\n"
    ))
    (finding,) = (await lint(project.settings())).findings
    assert (finding.rule, finding.line, finding.collection) == ("MS103", 4, "users")


async def test_a_delete_many_is_said_to_delete_not_to_rewrite(project) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", "async def up(ctx):\n    await ctx.db.users.delete_many({'status': 'old'})\n")
    (finding,) = (await lint(project.settings())).findings
    assert finding.rule == "MS102" and "it deletes every matching document" in finding.message


async def test_a_file_that_is_not_utf8_is_an_invalid_export_as_for_up(project, cli) -> None:  # type: ignore[no-untyped-def]
    (project.migrations / "0001_bad.py").write_bytes(b"# \xff\ndef up(ctx):\n    pass\n")
    result = cli(project, "lint", "--json")
    assert result.returncode == 20, result.stderr
    assert json.loads(result.stdout)["error"]["kind"] == "invalid_export"
    assert cli(project, "up").returncode == 20


async def test_a_file_in_a_declared_encoding_is_linted_as_up_imports_it(project, cli) -> None:  # type: ignore[no-untyped-def]
    """A legacy file that declares its encoding (PEP 263: ``# -*- coding: latin-1 -*-``) is a module ``up`` imports and
    runs; lint refused it ("not UTF-8 text", exit 20), and with it the whole line of such a project."""
    (project.migrations / "0001_legacy.py").write_bytes(
        b"# -*- coding: latin-1 -*-\n# caf\xe9 cache, rebuilt at start-up\nasync def up(ctx):\n    await ctx.db.sessions.drop()\n"
    )
    result = cli(project, "lint", "--json")
    assert result.returncode == 51, result.stderr
    (finding,) = json.loads(result.stdout)["findings"]
    assert (finding["rule"], finding["file"], finding["line"]) == ("MS101", "0001_legacy.py", 4)
    assert cli(project, "up").returncode == 0  # the same file, run


async def test_a_file_with_a_null_byte_names_no_line_it_does_not_have(project, cli) -> None:  # type: ignore[no-untyped-def]
    """Python refuses a null byte before reading any line: the message said "does not parse (line None)"."""
    (project.migrations / "0001_nul.py").write_bytes(b"async def up(ctx):\n    x = '\x00'\n")
    result = cli(project, "lint", "--json")
    assert result.returncode == 20, result.stderr
    message = json.loads(result.stdout)["error"]["message"]
    assert message == "0001_nul.py: does not parse: source code string cannot contain null bytes", message


async def test_an_unknown_declared_encoding_is_named_not_called_no_declaration(project, cli) -> None:  # type: ignore[no-untyped-def]
    """A file that declares an encoding Python does not know was said to "declare no other encoding"; ``up`` names it."""
    (project.migrations / "0001_enc.py").write_bytes(b"# -*- coding: bogus-9 -*-\nasync def up(ctx):\n    x = 'caf\xe9'\n")
    result = cli(project, "lint", "--json")
    assert result.returncode == 20, result.stderr
    message = json.loads(result.stdout)["error"]["message"]
    assert message == "0001_enc.py: failed to parse: unknown encoding: bogus-9", message


async def test_a_suppression_of_ms100_says_it_cannot_be_suppressed(project, cli) -> None:  # type: ignore[no-untyped-def]
    """``allow MS100`` was told "the suppression names MS100: name rules by id or name (...)", as if MS100 were unknown."""
    project.add("0001_a.py", "# mongoshift-lint: allow MS100, MS101 -- the reviewer agreed to it\n" + CASES["MS101"][0])
    document = json.loads(cli(project, "lint", "--json").stdout)
    assert [(f["line"], f["rule"]) for f in document["findings"]] == [(1, "MS100"), (3, "MS101"), (4, "MS101")]
    assert "MS100, which cannot be suppressed" in document["findings"][0]["message"]


async def test_a_file_named_twice_is_linted_once(project, cli) -> None:  # type: ignore[no-untyped-def]
    """``lint 0001_a 0001_a.py`` linted the file twice: each finding listed twice, and "2 files" counted."""
    project.add("0001_a.py", CASES["MS102"][0])
    result = cli(project, "lint", "--json", "0001_a", "0001_a.py", str(project.migrations / "0001_a.py"))
    assert result.returncode == 51, result.stderr
    document = json.loads(result.stdout)
    assert document["files"] == ["0001_a.py"]
    assert [(f["file"], f["rule"]) for f in document["findings"]] == [("0001_a.py", "MS102")]


async def test_a_name_with_a_tab_or_a_line_break_keeps_the_findings_table_one_row_each(project, cli) -> None:  # type: ignore[no-untyped-def]
    """A collection named by a literal holding a tab or a line break (``db["a\\tb"]``) split the finding's row of the
    tab-separated table in two. The message writes the name's escapes; ``--json`` keeps the name as the source says."""
    project.add("0001_a.py", 'async def up(ctx):\n    await ctx.db["a\\tb\\nc"].update_many({"x": 1}, {"$set": {"y": 2}})\n')
    text = cli(project, "lint")
    assert text.returncode == 51
    rows = [line for line in text.stdout.splitlines() if line.startswith("0001_a.py")]
    assert len(rows) == 1 and rows[0].count("\t") == 3, text.stdout
    assert "update_many on a\\tb\\nc has no _id-bounded filter" in rows[0]
    (finding,) = json.loads(cli(project, "lint", "--json").stdout)["findings"]
    assert finding["collection"] == "a\tb\nc"


async def test_an_aggregate_in_a_transaction_is_flagged_for_its_writing_stage(project) -> None:  # type: ignore[no-untyped-def]
    """The finding said "aggregate in a file with use_transaction = True: MongoDB refuses it", which an aggregate
    without $out or $merge is not; it names the stage that is refused."""
    project.add(
        "0001_a.py",
        "use_transaction = True\n\nasync def up(ctx):\n"
        "    await ctx.db.users.aggregate([{'$match': {'a': 1}}], session=ctx.session)\n"
        "    await ctx.db.users.aggregate([{'$match': {'a': 1}}, {'$merge': {'into': 'copy'}}], session=ctx.session)\n"
        "    await ctx.db.users.aggregate(pipeline=[{'$out': 'copy'}], session=ctx.session)\n",  # a keyword was not read
    )
    first, second = (await lint(project.settings())).findings
    assert (first.rule, first.line, second.rule, second.line) == ("MS104", 5, "MS104", 6)
    assert first.message.startswith("aggregate with $merge in a file with use_transaction = True"), first.message
    assert second.message.startswith("aggregate with $out in a file"), second.message
