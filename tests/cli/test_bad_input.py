"""Bad values on the command line and in the project's files: a clear one-line error, the documented exit code."""

from __future__ import annotations

import json

import pytest

from .test_cli import QUICK


@pytest.mark.parametrize("name", ["\udcff", "a\udcffb", "\ud800"])
def test_a_tenant_name_that_is_not_utf8_is_refused_with_46(project, name: str, cli) -> None:  # type: ignore[no-untyped-def]
    """An argument's bytes that are not UTF-8 reach the program as surrogates: refused as a name, shown escaped."""
    result = cli(project, "status", "--tenant", name, "--json")
    assert result.returncode == 46, result.stdout
    error = json.loads(result.stdout)["error"]
    assert "valid UTF-8" in error["message"] and "\\" in error["details"]["tenant"]
    assert "\udcff" not in result.stderr and "\ud800" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [["lint", "a\u202eb"], ["baseline", "--to", "a\u202eb"], ["background", "unlock", "a\u202eb"], ["status", "--dir", "a\u202eb"]],
)
def test_bidirectional_controls_of_an_argument_never_reach_the_terminal(project, args: list[str], cli) -> None:  # type: ignore[no-untyped-def]
    """U+202E would show the rest of the error line reversed: dropped like the other control characters."""
    result = cli(project, *args)
    assert result.returncode in (8, 9), result.stderr
    assert "ab" in result.stderr and "\u202e" not in result.stderr + result.stdout


HUGE = "a" * 100_000


@pytest.mark.parametrize(
    ("args", "code", "tail"),
    [
        (["up", "--batch", "1" * 100_000], 6, "is not a valid integer"),
        (["lint", HUGE], 8, ".py"),
        (["create", HUGE], 19, "max 81 characters"),
        (["background", "cancel", HUGE], 9, "lists the registered ones)"),
        (["status", "--dir", HUGE], 44, "File name too long"),
    ],
)
def test_a_huge_argument_is_quoted_back_by_its_start_and_end(project, args: list[str], code: int, tail: str, cli) -> None:  # type: ignore[no-untyped-def]
    """A 100 KB value in an error is cut short, and what the error says after it still shows."""
    for json_flag in ([], ["--json"]):
        result = cli(project, *args, *json_flag)
        assert result.returncode == code, result.stderr[:300]
        lines = (result.stdout + result.stderr).splitlines()
        assert max(len(line) for line in lines) < 500 and tail in result.stderr
        if json_flag:
            assert tail in json.loads(result.stdout)["error"]["message"]


def test_a_long_argument_that_may_hold_a_secret_is_shown_by_its_length(project, cli) -> None:  # type: ignore[no-untyped-def]
    """Cut, a password could lose what masks it: the whole run is replaced by its length."""
    uri = "mongodb://user:" + "p" * 400 + "@host/"
    result = cli(project, "up", "--wait", uri, "--json")
    assert result.returncode == 6
    assert "ppp" not in result.stdout + result.stderr and "characters>" in json.loads(result.stdout)["error"]["message"]


def test_a_flag_error_never_shows_a_password_it_quotes(project, cli) -> None:  # type: ignore[no-untyped-def]
    """A connection string given to the wrong flag: click quotes it, the one redaction masks it."""
    result = cli(project, "up", "--wait", "mongodb://user:s3cr3t@host/", "--json")
    assert result.returncode == 6
    assert "s3cr3t" not in result.stdout + result.stderr and "mongodb://***@host/" in result.stderr


@pytest.mark.parametrize("line", ["TOKEN=hunter9\x00x\n", "TOKEN='hunter9\x00x'\n", 'TOKEN="hunter9\x00x"\n'])
def test_a_nul_character_in_a_dotenv_value_is_refused_with_6(project, line: str, cli) -> None:  # type: ignore[no-untyped-def]
    """No environment variable can hold a NUL: exporting the value crashed (exit 1); the line is refused like any other."""
    (project.root / ".env").write_text(line, encoding="utf-8")
    result = cli(project, "status", "--json")
    assert result.returncode == 6, result.stdout
    message = json.loads(result.stdout)["error"]["message"]
    assert "line 1 (TOKEN): a NUL character" in message and "hunter9" not in result.stdout + result.stderr


@pytest.mark.parametrize("transaction", [False, True])
def test_an_async_up_that_returns_its_write_without_await_still_writes(project, sync_client, transaction: bool, cli) -> None:  # type: ignore[no-untyped-def]
    """``return ctx.db.x.insert_one(...)`` in an ``async def`` hands back the write not yet done: it was
    recorded applied with nothing written (a plain ``def`` returning a coroutine was already awaited)."""
    project.add(
        "0001_a.py",
        f"use_transaction = {transaction}\n\n"
        "async def up(ctx):\n    return ctx.db.marks.insert_one({'at': 'up'}" + (", session=ctx.session" if transaction else "") + ")\n\n"
        "async def down(ctx):\n    return ctx.db.marks.delete_many({}" + (", session=ctx.session" if transaction else "") + ")\n",
    )
    assert cli(project, "up").returncode == 0
    assert sync_client[project.db].marks.count_documents({}) == 1
    assert cli(project, "down").returncode == 0
    assert sync_client[project.db].marks.count_documents({}) == 0


UNREADABLE = """
class Unreadable(Exception):
    def __str__(self):
        raise RuntimeError("no text")
"""


@pytest.mark.parametrize(
    ("source", "code"),
    [(UNREADABLE + "\ndef up(ctx):\n    raise Unreadable()\n", 7), (UNREADABLE + "\nraise Unreadable()\n", 20)],
    ids=["raised by up", "raised at import"],
)
def test_an_exception_whose_message_cannot_be_read_is_still_the_migrations_failure(project, source: str, code: int, cli) -> None:  # type: ignore[no-untyped-def]
    """Its ``__str__`` raising made the report crash (exit 1, the migration not recorded failed)."""
    project.add("0001_a.py", source)
    result = cli(project, "up", "--json")
    assert result.returncode == code, result.stdout
    assert "Unreadable: (its message could not be read" in json.loads(result.stdout)["error"]["message"]
    if code == 7:
        rows = json.loads(cli(project, "status", "--json").stdout)["migrations"]
        assert [r["state"] for r in rows] == ["failed"]


@pytest.mark.parametrize("kind", ["def", "async def"])
@pytest.mark.parametrize(
    "raised",
    ["BaseException('own')", "GeneratorExit('own')", "__import__('asyncio').CancelledError()"],
    ids=["BaseException", "GeneratorExit", "CancelledError"],
)
def test_a_base_exception_raised_by_a_migration_is_its_failure(project, kind: str, raised: str, cli) -> None:  # type: ignore[no-untyped-def]
    """Not an Exception, it went past every handler: a traceback and exit 1 (or no JSON at all), the
    migration left pending. Like sys.exit(), it is the migration's failure: exit 7, recorded failed."""
    project.add("0001_a.py", f"{kind} up(ctx):\n    raise {raised}\n")
    result = cli(project, "up", "--json")
    assert result.returncode == 7, result.stderr[-2000:]
    assert "was raised" in json.loads(result.stdout)["error"]["message"] and "Traceback" not in result.stderr
    assert [r["state"] for r in json.loads(cli(project, "status", "--json").stdout)["migrations"]] == ["failed"]


@pytest.mark.parametrize("value", ["inf", "1e308", "nan", "31536001"])
def test_audit_refuses_a_stale_after_no_waiting_time_can_be(project, value: str, cli) -> None:  # type: ignore[no-untyped-def]
    """Infinity or 1e308 seconds overflowed the time arithmetic: an unexpected error, exit 1."""
    result = cli(project, "audit", "--stale-after", value, "--json")
    assert result.returncode == 6, result.stdout
    assert "--stale-after" in json.loads(result.stdout)["error"]["message"]


async def test_the_api_refuses_an_infinite_stale_after(project) -> None:  # type: ignore[no-untyped-def]
    from mongoshift.api.health import audit
    from mongoshift.errors import ConfigInvalidError

    with pytest.raises(ConfigInvalidError, match="from 0 to 31,536,000"):
        await audit(project.settings(), stale_after=float("inf"))


@pytest.mark.parametrize("args", [[], ["background"], ["dry-run"], ["collections"]], ids=["mongoshift", "background", "dry-run", "collections"])
def test_a_group_without_its_command_is_one_error_line(tmp_path, args: list[str], cli) -> None:  # type: ignore[no-untyped-def]
    """click's message for it is the whole help text, which was printed as a 40-line 'error: Usage: ...'."""
    result = cli(tmp_path, *args)
    assert result.returncode == 6
    assert result.stderr.splitlines()[0] == "error: Missing command." and len(result.stderr.splitlines()) == 2
    assert "--help" in result.stderr


@pytest.mark.parametrize(
    ("flags", "setting", "source"),
    [
        (["--dir", ""], None, "from --dir"),
        (["--dir", "  "], None, "from --dir"),
        ([], {"migrations_dir": ""}, "mongoshift.toml"),
        ([], {"collections_dir": ""}, "mongoshift.toml"),
        ([], {"template_path": " "}, "mongoshift.toml"),
    ],
)
def test_an_empty_folder_setting_is_refused_not_taken_as_the_current_folder(project, flags, setting, source: str, cli) -> None:  # type: ignore[no-untyped-def]
    """An empty path is the current folder: status showed every applied file 'missing' and exited 0."""
    if setting:
        project.write_config(**setting)
        text = project.config.read_text(encoding="utf-8")
        if "migrations_dir" in setting:  # written once, empty
            project.config.write_text(text.replace('migrations_dir = "migrations"\n', "", 1), encoding="utf-8")
    result = cli(project, "status", *flags, "--json")
    assert result.returncode == 6, result.stdout
    message = json.loads(result.stdout)["error"]["message"]
    assert "must name a path, not be empty" in message and source in message


@pytest.mark.parametrize(("args", "code"), [(["--config", "/nowhere/\udcff.toml"], 6), (["--dir", "/nowhere/\udcffx"], 8)])
def test_an_argument_that_is_not_utf8_is_shown_by_its_bytes(project, args: list[str], code: int, cli) -> None:  # type: ignore[no-untyped-def]
    """Its byte 0xff reached the output as a lone surrogate: '\\udcff' on the terminal, an escape strict JSON readers refuse."""
    result = cli(project, "status", *args, "--json")
    assert result.returncode == code
    assert "\\udcff" not in result.stdout and "\udcff" not in result.stdout + result.stderr
    assert "/nowhere/\\xff" in json.loads(result.stdout)["error"]["message"] and "/nowhere/\\xff" in result.stderr


@pytest.mark.parametrize(
    ("host", "said"),
    [("127.0.0.1", "an IP address is not a valid hostname"), ("a.example.com,b.example.com", "one, and only one, hostname"), ("db.example.com:27017", "port")],
)
def test_a_mongodb_srv_host_the_driver_refuses_is_an_invalid_uri(project, host: str, said: str, cli) -> None:  # type: ignore[no-untyped-def]
    """The driver refuses it before any lookup, at the first command: it was 'cannot reach MongoDB
    within 10s: the network connection failed' (exit 5), though nothing was tried."""
    result = cli(project, "status", "--uri", f"mongodb+srv://user:hunter9@{host}/", "--json")
    assert result.returncode == 6, result.stdout
    message = json.loads(result.stdout)["error"]["message"]
    assert message.startswith("invalid uri:") and said in message and "hunter9" not in result.stdout + result.stderr


@pytest.mark.parametrize("command", [["up"], ["dry-run", "up"]])
@pytest.mark.parametrize("label", [str(2**70), str(2**53)])
def test_a_batch_label_beyond_what_is_stored_is_refused(project, command: list[str], label: str, cli) -> None:  # type: ignore[no-untyped-def]
    """2**70 overflowed the BSON integer once a file was pending: an unexpected error, exit 1."""
    project.add("0001_a.py", "def up(ctx):\n    pass\n")
    result = cli(project, *command, "--batch", label, "--json")
    assert result.returncode == 6, result.stdout
    assert "--batch" in json.loads(result.stdout)["error"]["message"]


async def test_the_api_refuses_a_batch_label_beyond_what_is_stored(project) -> None:  # type: ignore[no-untyped-def]
    from mongoshift.api.migrations import up
    from mongoshift.errors import ConfigInvalidError

    project.add("0001_a.py", "def up(ctx):\n    pass\n")
    with pytest.raises(ConfigInvalidError, match="from 1 to 9,007,199,254,740,991"):
        await up(project.settings(), batch=2**70)


@pytest.mark.parametrize(
    "args",
    [["run-log", "a\udcffb"], ["background", "status", "a\udcffb"], ["background", "pause", "a\udcffb"], ["background", "watch", "--collections", "a\udcffb"]],
    ids=["run-log", "background status", "background pause", "background watch"],
)
def test_a_name_that_is_not_utf8_sent_to_the_server_is_refused_with_6(project, args: list[str], cli) -> None:  # type: ignore[no-untyped-def]
    """No BSON string holds it: encoding it crashed with an unexpected UnicodeEncodeError, exit 1."""
    result = cli(project, *args, "--json")
    assert result.returncode == 6, result.stdout
    assert "not UTF-8 text: " in json.loads(result.stdout)["error"]["message"] and "\\xff" in result.stderr  # escaped, with its
    # neighbours when nothing around it looks like a URI's user and password


@pytest.mark.parametrize(
    "args",
    [["up", ""], ["up", "--to", ""], ["up", " "], ["dry-run", "up", ""], ["redo", ""], ["down", "--to", ""]],
    ids=["up FILE", "up --to", "up blank", "dry-run up", "redo", "down --to"],
)
def test_an_empty_migration_name_is_refused_never_taken_as_none(project, sync_client, args: list[str], cli) -> None:  # type: ignore[no-untyped-def]
    """`mongoshift up "$FILE"` with the variable unset applied every pending file (exit 0)."""
    project.add("0001_a.py", QUICK)
    project.add("0002_b.py", QUICK)
    if args[0] in ("redo", "down"):
        assert cli(project, "up", "0001_a").returncode == 0
    before = sorted(r["name"] for r in sync_client[project.db]["_mongoshift_migrations"].find({"status": "applied"}))
    result = cli(project, *args, "--json")
    assert result.returncode == 19, result.stdout
    assert "cannot be empty" in json.loads(result.stdout)["error"]["message"]
    assert sorted(r["name"] for r in sync_client[project.db]["_mongoshift_migrations"].find({"status": "applied"})) == before


@pytest.mark.parametrize("args", [["baseline", "--to", "", "--yes"], ["squash", "--to", "", "--yes"], ["up", ""]], ids=["baseline", "squash", "up"])
def test_an_empty_migration_name_is_not_told_to_be_left_out(project, args: list[str], cli) -> None:  # type: ignore[no-untyped-def]
    """The refusal said "name a file, or leave the argument out", wrong where the name is required
    (``baseline --to``, ``squash --to``: leaving it out is a usage error)."""
    project.add("0001_a.py", QUICK)
    result = cli(project, *args, "--json")
    assert result.returncode == 19, result.stdout
    message = json.loads(result.stdout)["error"]["message"]
    assert "cannot be empty" in message and "leave" not in message, message


BACKGROUND = """
from mongoshift import Background

def migrate(doc, ctx):
    return doc

background = Background(collection="people", from_version=0, to_version=1, migrate=migrate)
"""


@pytest.mark.parametrize("spelled", ["migrations/0001_bg.py", "./migrations/0001_bg", "0001_bg"])
def test_a_background_name_may_be_given_as_a_path_into_the_migrations_folder(project, spelled: str, cli) -> None:  # type: ignore[no-untyped-def]
    """As the line's commands take FILE (shell completion writes the path): it was 'not registered', exit 9."""
    project.add("0001_bg.py", BACKGROUND)
    assert cli(project, "up").returncode == 0
    status = cli(project, "background", "status", spelled, "--json")
    assert status.returncode == 0, status.stdout
    paused = cli(project, "background", "pause", spelled, "--json")
    assert paused.returncode == 0 and json.loads(paused.stdout)["name"] == "0001_bg.py"


def test_sys_exit_in_a_hook_is_not_called_a_migrations_failure(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """``sys.exit(3)`` in a hook said "raise an exception to fail a migration": the same words for every kind of
    user code (a hook, a provider, a transform), where no migration is the one failing."""
    (project.root / "hooks.py").write_text("import sys\n\ndef before_all(ctx):\n    sys.exit(3)\n", encoding="utf-8")
    project.write_config(hooks="hooks.py")
    project.add("0001_a.py", QUICK)
    result = cli(project, "up", "--json")
    assert result.returncode == 12, result.stdout
    message = json.loads(result.stdout)["error"]["message"]
    assert "sys.exit(3) was called" in message and "migration" not in message, message
    assert sync_client[project.db]["_mongoshift_migrations"].count_documents({}) == 0


@pytest.mark.parametrize(
    ("source", "named"), [("before_all = 5\n", "before_all is int, not a function"), ("after_each = None\n", "after_each is NoneType, not a function")]
)
def test_a_hook_name_bound_to_no_function_is_refused(project, sync_client, source: str, named: str, cli) -> None:  # type: ignore[no-untyped-def]
    """It was skipped without a word: the run went on as if the hook did not exist."""
    (project.root / "hooks.py").write_text(source, encoding="utf-8")
    project.write_config(hooks="hooks.py")
    project.add("0001_a.py", QUICK)
    result = cli(project, "up", "--json")
    assert result.returncode == 12, result.stdout
    assert named in json.loads(result.stdout)["error"]["message"]
    assert sync_client[project.db]["_mongoshift_migrations"].count_documents({"status": "applied"}) == 0


@pytest.mark.parametrize("args", [["lint", "migrations/"], ["up", "./migrations"], ["dry-run", "down", "migrations/."]])
def test_the_migrations_folder_given_as_file_is_named_as_such(project, args: list[str], cli) -> None:  # type: ignore[no-untyped-def]
    """It was called 'outside the migrations folder', which it is not."""
    project.add("0001_a.py", QUICK)
    result = cli(project, *args, "--json")
    assert result.returncode == 19, result.stdout
    assert "is the migrations folder itself" in json.loads(result.stdout)["error"]["message"]


@pytest.mark.parametrize("name", ["naïve", "\uff11\uff12\uff13"])
def test_a_migration_name_with_letters_beyond_ascii_says_ascii(project, name: str, cli) -> None:  # type: ignore[no-untyped-def]
    """'use letters, digits' refused 'naïve', whose letters are letters: the rule is ASCII."""
    result = cli(project, "create", name, "--json")
    assert result.returncode == 19
    assert "use ASCII letters and digits" in json.loads(result.stdout)["error"]["message"]
    assert list(project.migrations.iterdir()) == []


def test_a_project_file_saved_with_a_byte_order_mark_is_read(project, cli) -> None:  # type: ignore[no-untyped-def]
    """Windows editors write one; it was 'not valid TOML: Invalid statement (at line 1, column 1)' (a .env with one was read)."""
    project.config.write_bytes(b"\xef\xbb\xbf" + project.config.read_bytes())
    (project.root / "collections").mkdir()
    (project.root / "collections" / "people.toml").write_bytes(b'\xef\xbb\xbfname = "people"\nindexes = [{keys = {email = 1}}]\n')
    project.add("0001_a.py", QUICK)
    assert cli(project, "status").returncode == 0
    result = cli(project, "converge", "--dry-run", "--json")
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize(("reason", "said"), [("r" * 100_000, "100000 characters long: at most 512"), ("   ", "must not be empty")])
@pytest.mark.parametrize("control", [["pause"], ["throttle", "--pause-ms", "5"], ["repin", "--yes"]])
def test_a_background_control_refuses_a_reason_converge_would_refuse(project, sync_client, control: list[str], reason: str, said: str, cli) -> None:  # type: ignore[no-untyped-def]
    """A 100 KB --reason was written into the migration's history (converge's --reason is refused over 512)."""
    project.add("0001_bg.py", BACKGROUND)
    assert cli(project, "up").returncode == 0
    before = sync_client[project.db]["_mongoshift_background"].find_one({"_id": "0001_bg.py"})
    assert before is not None
    result = cli(project, "background", control[0], "0001_bg", *control[1:], "--reason", reason, "--json")
    assert result.returncode == 6, result.stdout
    assert said in json.loads(result.stdout)["error"]["message"]
    assert sync_client[project.db]["_mongoshift_background"].find_one({"_id": "0001_bg.py"}) == before


@pytest.mark.parametrize(
    ("collection", "said"),
    [
        ("", "not a collection name"),
        ("a$b", "not a collection name"),
        ("system.users", "belong to the server"),
        ("_mongoshift_migrations", "mongoshift's own"),
    ],
)
def test_import_refuses_a_collection_that_cannot_be_the_other_tools_changelog(project, collection: str, said: str, cli) -> None:  # type: ignore[no-untyped-def]
    """'' was read as the tool's default collection, 'a$b' ended in the driver's InvalidName (exit 1),
    and mongoshift's own changelog was read as the other tool's."""
    result = cli(project, "import", "--from", "migrate-mongo", "--collection", collection, "--dry-run", "--json")
    assert result.returncode == 6, result.stdout
    assert said in json.loads(result.stdout)["error"]["message"]


@pytest.mark.parametrize("args", [["--version", "--json"], ["--json", "--version"]])
def test_version_with_json_is_one_document_whichever_comes_first(tmp_path, args: list[str], cli) -> None:  # type: ignore[no-untyped-def]
    """`--version --json` printed the text line: --json was read only after --version had ended the run."""
    result = cli(tmp_path, *args)
    assert result.returncode == 0
    assert set(json.loads(result.stdout)) == {"version"}


@pytest.mark.parametrize(
    ("names", "said"),
    [("users," + "c" * 300, "at most 255 bytes"), ("a$b", "refuses '$'"), ("users,system.views", "belong to the server")],
)
def test_background_watch_refuses_a_collection_name_mongodb_refuses(project, names: str, said: str, cli) -> None:  # type: ignore[no-untyped-def]
    """Such a name was watched (idle until stopped) and logged whole, 100 KB of it."""
    result = cli(project, "background", "watch", "--collections", names, "--json")
    assert result.returncode == 6, result.stdout
    assert said in json.loads(result.stdout)["error"]["message"]


def test_a_config_file_that_never_ends_is_refused_at_1_mb(project, cli) -> None:  # type: ignore[no-untyped-def]
    """`--config /dev/zero` was read whole: the memory filled up, then an unexpected MemoryError (exit 1)."""
    result = cli(project, "status", "--config", "/dev/zero", "--json")
    assert result.returncode == 6, result.stdout
    assert "larger than 1 MB" in json.loads(result.stdout)["error"]["message"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["create", "x", "--template", "/dev/zero"], "is not a regular file"),
        (["import", "--from", "beanie", "--map", "/dev/zero", "--dry-run"], "not a regular file"),
    ],
)
def test_a_template_or_map_that_is_a_device_is_refused(project, args: list[str], said: str, cli) -> None:  # type: ignore[no-untyped-def]
    """/dev/zero was read whole: the memory filled up, then an unexpected MemoryError (exit 1)."""
    result = cli(project, *args, "--json")
    assert result.returncode == 6, result.stdout
    assert said in json.loads(result.stdout)["error"]["message"]
    assert list(project.migrations.iterdir()) == []


def test_undecodable_bytes_near_a_uri_s_password_are_shown_alone() -> None:
    """The refusal quotes the text around the bytes; around them may be a URI's user and password."""
    from mongoshift.cli.main import not_utf8

    def refusal(text: str) -> str:
        try:
            text.encode()
        except UnicodeEncodeError as exc:
            return not_utf8(exc).message
        raise AssertionError("encoded")

    assert "'a\\xffb'" in refusal("a\udcffb")
    shown = refusal("mongodb://admin:hunter2@h/a\udcffb")
    assert "hunter2" not in shown and "admin" not in shown and "'\\xff'" in shown


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("0001_a.PY", "file names are case-sensitive: the extension is '.py', not '.PY'); did you mean 0001_a.py?"),
        ("migrations/0001_a.Py", "not '.Py'); did you mean 0001_a.py?"),
        ("0001_a.txt", "a migration file ends in '.py': '.txt' makes 0001_a.txt.py a name no migration has); did you mean 0001_a.py?"),
        ("0001_A", "did you mean 0001_a.py?"),
        ("0002_c", "the files next to where it would sort: 0001_a.py, 0003_b.py (2 in the folder)"),
    ],
)
def test_a_file_name_no_migration_has_says_what_was_looked_for_and_what_is_near(project, cli, name: str, says: str) -> None:  # type: ignore[no-untyped-def]
    """`up 0001_a.PY` said "not found: 0001_a.PY.py" and nothing else; other files of the folder (a .env) are never listed."""
    project.add("0001_a.py", QUICK)
    project.add("0003_b.py", QUICK)
    (project.migrations / ".env").write_text("TOKEN=hunter9\n", encoding="utf-8")
    (project.migrations / "0001_a.txt").write_text("x", encoding="utf-8")  # not Python: never listed
    result = cli(project, "up", name, "--json")
    assert result.returncode == 8, result.stdout
    error = json.loads(result.stdout)["error"]
    assert error["message"].startswith("migration file not found: ") and says in error["message"], error["message"]
    assert "looked for it in the migrations folder" in error["message"] and ".env" not in result.stdout + result.stderr
    assert error["details"]["nearby"] and all(n.endswith(".py") for n in error["details"]["nearby"])


@pytest.mark.parametrize("args", [["down", "0001_A"], ["down", "--to", "0001_a.PY"], ["down", "--to", "0001-a"]])
def test_a_down_name_no_migration_has_says_what_is_near_as_up_does(project, cli, args: list[str]) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", QUICK)
    project.add("0003_b.py", QUICK)
    assert cli(project, "up").returncode == 0
    result = cli(project, *args, "--json")
    assert result.returncode == 8, result.stdout
    error = json.loads(result.stdout)["error"]
    assert "did you mean 0001_a.py?" in error["message"] and error["details"]["nearby"] == ["0001_a.py"], error["message"]


@pytest.mark.parametrize(("host", "named"), [("h\udcffx", "bytes 0xFF"), ("h\x07x", "U+0007"), ("h\x9bx", "U+009B")])
def test_a_uri_with_bytes_that_are_not_utf8_or_a_control_character_is_refused_with_6(project, host: str, named: str, cli) -> None:  # type: ignore[no-untyped-def]
    """Before, the driver took such a host and the command waited the timeout out, then said exit 5, "the network
    connection failed"; now it is refused as the bad value it is, by code point, the URI (and its password) never shown."""
    project.add("0001_a.py", QUICK)
    result = cli(project, "status", "--uri", f"mongodb://user:pa55word@{host}:27017/", "--json")
    assert result.returncode == 6, result.stdout
    error = json.loads(result.stdout)["error"]
    assert error["kind"] == "config_invalid" and named in error["message"] and "--uri" in error["message"]
    assert "pa55word" not in result.stdout + result.stderr
