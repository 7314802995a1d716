"""What the command line shows and stores about failures: no document value, no secret,
no terminal control sequence, the right exit code for refused credentials, and a
traceback only when asked for (``-v``)."""

from __future__ import annotations

import errno
import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from typing import Any

from pymongo import MongoClient

from mongoshift.project.connection import auth_summary

from ..conftest import cli_env, cli_process

DUPLICATE_KEY = """
async def up(ctx):
    await ctx.db.people.create_index("email", unique=True, name="email_unique")
    await ctx.db.people.insert_one({"email": "zebra-7731@leak.example"})
    await ctx.db.people.insert_one({"email": "zebra-7731@leak.example"})
"""

BULK_WRITE = """
async def up(ctx):
    await ctx.db.people.create_index("email", unique=True, name="email_unique")
    await ctx.db.people.insert_many(
        [
            {"email": "walrus-9902@leak.example", "note": "quokka-secret-note"},
            {"email": "walrus-9902@leak.example", "note": "quokka-secret-note"},
        ],
        ordered=False,
    )
"""

SECRETS_IN_MESSAGE = """
def up(ctx):
    raise RuntimeError(
        "could not open mongodb://report:pa55-hunter2@10.0.0.9:27017/?proxyPassword=prox-hunter3"
        "&tlsCertificateKeyFilePassword=pem-hunter4"
        "&authMechanismProperties=SERVICE_NAME:mongodb,AWS_SESSION_TOKEN:aws-hunter5&retryWrites=true"
    )
"""

SECRET_WORDS = ("pa55-hunter2", "prox-hunter3", "pem-hunter4", "aws-hunter5")


def changelog_record(project: Any, name: str) -> dict[str, Any]:
    with MongoClient(project.uri, serverSelectionTimeoutMS=30_000) as client:
        record = client[project.db]["_mongoshift_migrations"].find_one({"name": name})
    assert record is not None, f"no changelog record for {name}"
    return record


def everything(*results: Any) -> str:
    return "\n".join(r.stdout + r.stderr for r in results)


# ---------------------------------------------------------------- item 12: document values


def test_duplicate_key_value_stays_out_of_every_output_and_the_changelog(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_dup.py", DUPLICATE_KEY)
    plain = cli(project, "up")
    assert plain.returncode == 7, plain.stderr
    as_json = cli(project, "up", "--json")
    assert as_json.returncode == 7, as_json.stderr
    document = json.loads(as_json.stdout)
    record = changelog_record(project, "0001_dup.py")
    seen = everything(plain, as_json) + json.dumps(document) + str(record)
    assert "zebra-7731" not in seen
    assert "11000" in plain.stderr and "email_unique" in plain.stderr
    assert "11000" in document["error"]["message"] and "email_unique" in document["error"]["message"]
    assert "11000" in record["error"] and "email_unique" in record["error"]


def test_bulk_write_error_documents_stay_out_of_every_output_and_the_changelog(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_bulk.py", BULK_WRITE)
    plain = cli(project, "up")
    assert plain.returncode == 7, plain.stderr
    as_json = cli(project, "up", "--json")
    assert as_json.returncode == 7
    document = json.loads(as_json.stdout)
    record = changelog_record(project, "0001_bulk.py")
    seen = everything(plain, as_json) + json.dumps(document) + str(record)
    assert "walrus-9902" not in seen and "quokka-secret-note" not in seen
    assert "BulkWriteError" in plain.stderr and "11000" in plain.stderr
    assert "11000" in record["error"] and "email_unique" in record["error"]


PYTHON_QUOTES_THE_VALUE = """
async def up(ctx):
    await ctx.db.people.insert_one({"email": "-".join(["ann", "4471"]) + "@leak.example"})
    async for person in ctx.db.people.find():
        int(person["email"])  # ValueError: invalid literal for int() with base 10: '<the value>'
"""

OWN_EXCEPTION = """
class PeopleNotReady(Exception):
    pass


def up(ctx):
    raise PeopleNotReady("run 'backfill people' first: 12 'legacy' rows")
"""


def test_a_value_pythons_own_exception_quotes_stays_out_of_every_output_and_the_changelog(project, cli) -> None:  # type: ignore[no-untyped-def]
    """``int(doc["email"])`` in a migration: Python's message quotes the document's value, which the changelog,
    stderr and ``--json`` carried as they stored it, where a background transform's was masked."""
    project.add("0001_quoted.py", PYTHON_QUOTES_THE_VALUE)
    plain = cli(project, "up", "-v")
    assert plain.returncode == 7, plain.stderr
    as_json = cli(project, "up", "--json")
    document = json.loads(as_json.stdout)
    record = changelog_record(project, "0001_quoted.py")
    seen = everything(plain, as_json) + json.dumps(document) + str(record)
    assert "ann-4471" not in seen
    assert "invalid literal for int() with base 10: '***'" in record["error"]
    assert "ValueError" in document["error"]["message"]


def test_an_authors_own_exception_keeps_its_words(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_own.py", OWN_EXCEPTION)
    result = cli(project, "up", "--json")
    assert result.returncode == 7
    assert "run 'backfill people' first: 12 'legacy' rows" in json.loads(result.stdout)["error"]["message"]
    assert "run 'backfill people' first: 12 'legacy' rows" in changelog_record(project, "0001_own.py")["error"]


def test_a_migrations_own_long_message_is_capped(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_long.py", "def up(ctx):\n    raise ValueError('x' * 50_000)\n")
    result = cli(project, "up", "--json")
    assert result.returncode == 7
    record = changelog_record(project, "0001_long.py")
    assert len(record["error"]) <= 1100
    assert len(json.loads(result.stdout)["error"]["message"]) <= 1100
    assert len(result.stderr) < 3000


# ---------------------------------------------------------------- item 13: credentials


def test_secret_uri_parts_are_masked_in_errors_json_and_the_changelog(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_secret.py", SECRETS_IN_MESSAGE)
    plain = cli(project, "up")
    as_json = cli(project, "up", "--json")
    assert plain.returncode == 7 and as_json.returncode == 7
    record = changelog_record(project, "0001_secret.py")
    seen = everything(plain, as_json) + str(record)
    for word in SECRET_WORDS:
        assert word not in seen, word
    # what is not secret stays readable
    assert "10.0.0.9:27017" in record["error"] and "SERVICE_NAME:mongodb" in record["error"]
    assert "retryWrites=true" in record["error"]


def test_init_with_a_password_keeps_it_out_of_the_config_file(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.config.unlink()
    uri = "mongodb://deploy:init-hunter6@db.internal.example:27017/?authSource=admin&tlsCertificateKeyFilePassword=init-hunter7"
    result = cli(project, "init", "--uri", uri, "--db", "app", "--json")
    assert result.returncode == 0, result.stderr
    text = project.config.read_text(encoding="utf-8")
    assert "init-hunter6" not in text and "init-hunter7" not in text
    assert "db.internal.example:27017" in text and "authSource=admin" in text
    # the file points to where the credentials go, right above the uri it wrote
    assert "# environment variable MONGOSHIFT_URI (or in a .env file git ignores), which overrides it.\nuri = " in text
    assert "MONGOSHIFT_URI" in result.stderr
    said = json.loads(result.stdout)
    assert said["uri_secrets_removed"] == ["password", "tlsCertificateKeyFilePassword"] and said["uri_env"] == "MONGOSHIFT_URI"
    assert "init-hunter6" not in result.stdout + result.stderr


def test_init_without_a_password_writes_the_uri_as_given(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.config.unlink()
    result = cli(project, "init", "--uri", "mongodb://db.internal.example:27017/?replicaSet=rs0", "--db", "app")
    assert result.returncode == 0
    assert 'uri = "mongodb://db.internal.example:27017/?replicaSet=rs0"' in project.config.read_text(encoding="utf-8")
    assert "not written here" not in project.config.read_text(encoding="utf-8")
    assert "MONGOSHIFT_URI" not in result.stderr


def test_init_keeps_a_password_holding_a_hash_out_of_the_config_file(project, cli) -> None:  # type: ignore[no-untyped-def]
    # The driver takes "pa#ss" as the password ("#" ends nothing before the hosts); it was read as the URI's end
    # there, so the file got the password and init said nothing had been removed.
    project.config.unlink()
    result = cli(project, "init", "--uri", "mongodb://deploy:init#hunter10@db.internal.example:27017/?authSource=admin", "--db", "app", "--json")
    assert result.returncode == 0, result.stderr
    text = project.config.read_text(encoding="utf-8")
    assert "hunter10" not in text and "init#" not in text
    assert 'uri = "mongodb://db.internal.example:27017/?authSource=admin"' in text
    assert json.loads(result.stdout)["uri_secrets_removed"] == ["password"]


def test_a_password_that_the_driver_would_cut_in_two_is_refused_unnamed(project, cli) -> None:  # type: ignore[no-untyped-def]
    # A "?" or "/" in a password makes the driver read its end as an option's name or the database: the
    # "unknown option" error quoted that part of the password, and init wrote it into the committed file.
    project.config.unlink()
    for password in ("cut?hunter11", "cut/hunter11", "cut@hunter11", "cut%hunter11"):
        uri = f"mongodb://deploy:{password}@127.0.0.1:1/?directConnection=true"
        result = cli(project, "init", "--uri", uri, "--db", "app", "--json")
        assert result.returncode == 6, (password, result.stdout)
        assert "percent-encoded" in json.loads(result.stdout)["error"]["message"]
        assert "hunter11" not in result.stdout + result.stderr
        assert not project.config.exists()
    project.write_config()
    result = cli_process(project, "status", "--json", env={**cli_env(), "MONGOSHIFT_URI": "mongodb://deploy:cut?hunter11@127.0.0.1:1/?directConnection=true"})
    assert result.returncode == 6 and "percent-encoded" in result.stdout
    assert "hunter11" not in result.stdout + result.stderr


def test_a_password_in_the_config_file_is_warned_about_once(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.uri = "mongodb://deploy:cfg-hunter8@127.0.0.1:1/?directConnection=true"
    project.write_config(connect_timeout_seconds=0.5)
    result = cli(project, "status")
    assert result.returncode in (5, 35)
    assert result.stderr.count("password") >= 1
    warnings = [line for line in result.stderr.splitlines() if "mongoshift.toml" in line and "password" in line]
    assert len(warnings) == 1, result.stderr
    assert "cfg-hunter8" not in result.stdout + result.stderr


def test_a_password_from_the_environment_is_not_warned_about(project) -> None:  # type: ignore[no-untyped-def]
    project.uri = "mongodb://127.0.0.1:1/?directConnection=true"
    project.write_config(connect_timeout_seconds=0.5)
    result = cli_process(project, "status", env={**cli_env(), "MONGOSHIFT_URI": "mongodb://deploy:env-hunter9@127.0.0.1:1/?directConnection=true"})
    assert result.returncode in (5, 35)
    assert "password" not in result.stderr.lower().replace("wrong user, password", "")
    assert "env-hunter9" not in result.stderr + result.stdout


def test_a_failing_uri_command_or_factory_is_exit_41_and_shows_no_secret(project, cli) -> None:  # type: ignore[no-untyped-def]
    script = (
        "import sys; print('mongodb://deploy:cmd-hunter11@db.example:27017'); "
        "print('vault: denied for token=cmd-hunter12', file=sys.stderr); sys.exit(3)"
    )
    project.config.write_text(
        f'[mongoshift]\nuri_command = {json.dumps([sys.executable, "-c", script])}\ndb = "{project.db}"\nmigrations_dir = "migrations"\n',
        encoding="utf-8",
    )
    by_command = cli(project, "status", "--json")
    assert by_command.returncode == 41, by_command.stderr
    error = json.loads(by_command.stdout)["error"]
    assert error["kind"] == "uri_unavailable" and "exited with code 3" in error["message"] and "vault: denied" in error["message"]

    (project.root / "failing_source.py").write_text(
        "def mongo_uri():\n    raise RuntimeError('cannot use mongodb://deploy:fac-hunter13@db.example:27017')\n", encoding="utf-8"
    )
    project.config.write_text(
        f'[mongoshift]\nuri_factory = "failing_source:mongo_uri"\ndb = "{project.db}"\nmigrations_dir = "migrations"\n', encoding="utf-8"
    )
    by_factory = cli(project, "status")
    assert by_factory.returncode == 41 and "failing_source:mongo_uri" in by_factory.stderr and "RuntimeError" in by_factory.stderr
    seen = everything(by_command, by_factory)
    for word in ("cmd-hunter11", "cmd-hunter12", "fac-hunter13"):
        assert word not in seen, word


# ---------------------------------------------------------------- item 15: refused credentials


def _with_credentials(uri: str, user: str, password: str) -> str:
    scheme, rest = uri.split("://", 1)
    return f"{scheme}://{user}:{password}@{rest.split('@', 1)[-1]}"


def test_wrong_credentials_are_reported_as_an_authentication_failure(project) -> None:  # type: ignore[no-untyped-def]
    uri = _with_credentials(project.uri, "nobody-user", "wrong-hunter10")
    plain = cli_process(project, "status", env={**cli_env(), "MONGOSHIFT_URI": uri})
    as_json = cli_process(project, "status", "--json", env={**cli_env(), "MONGOSHIFT_URI": uri})
    assert plain.returncode == 35, plain.stderr
    assert as_json.returncode == 35
    error = json.loads(as_json.stdout)["error"]
    assert error["kind"] == "auth_failed" and error["code"] == 35
    assert "authentication failed" in plain.stderr
    assert "cannot reach" not in plain.stderr
    host = re.split(r"[/?]", uri.split("@", 1)[1])[0]
    assert host in plain.stderr
    assert f"auth source {auth_summary(uri)[1]}" in plain.stderr  # admin, unless the test URI names another
    seen = everything(plain, as_json)
    assert "wrong-hunter10" not in seen and "nobody-user" not in seen


# ---------------------------------------------------------------- item 14: control characters

HOSTILE_FAILURE = """
def up(ctx):
    ctx.logger.warning("logged \\x1b[2Jclear \\x9bcsi \\x07bell")
    raise RuntimeError("boom \\x1b[2Jclear \\x9bcsi \\x1b]0;title\\x07 end")
"""

HOSTILE = ("\x1b[2J", "\x9b", "\x1b]0;", "\x07", "\x1b]2;", "\x1b[31")


def run_on_terminal(project: Any, *args: str) -> tuple[int, str]:
    """The CLI with stdout and stderr on a pseudo-terminal, as a user at a shell sees it."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "mongoshift", *args], cwd=project.root, env={**cli_env(), "TERM": "xterm", "COLUMNS": "200"},
        stdin=subprocess.DEVNULL, stdout=follower, stderr=follower,
    )
    os.close(follower)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.5)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError as exc:
                if exc.errno == errno.EIO:
                    break
                raise
            if not data:
                break
            chunks.append(data)
        elif process.poll() is not None:
            break
    os.close(leader)
    code = process.wait(timeout=30)
    return code, b"".join(chunks).decode("utf-8", errors="replace")


def _no_hostile(text: str) -> None:
    for sequence in HOSTILE:
        assert sequence not in text, repr(sequence)


def test_control_characters_never_reach_a_pipe(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_hostile.py", HOSTILE_FAILURE)
    result = cli(project, "up")
    assert result.returncode == 7
    assert "boom" in result.stderr and "clear" in result.stderr and "logged" in result.stderr
    _no_hostile(result.stdout + result.stderr)
    status = cli(project, "status")  # the failed record's error, read back from the changelog
    _no_hostile(status.stdout + status.stderr)


def test_control_characters_never_reach_a_terminal(project) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_hostile.py", HOSTILE_FAILURE)
    code, text = run_on_terminal(project, "up")
    assert code == 7, text
    assert "boom" in text and "logged" in text
    _no_hostile(text)


def test_a_misnamed_file_with_an_escape_sequence_is_named_safely(project, cli) -> None:  # type: ignore[no-untyped-def]
    (project.migrations / "evil\x1b]2;owned\x07\x1b[31mname.py").write_text("def up(ctx):\n    pass\n", encoding="utf-8")
    piped = cli(project, "status")
    assert piped.returncode == 19
    assert "owned" in piped.stderr
    _no_hostile(piped.stdout + piped.stderr)
    code, text = run_on_terminal(project, "status")
    assert code == 19 and "owned" in text
    _no_hostile(text)
    as_json = cli(project, "status", "--json")
    message = json.loads(as_json.stdout)["error"]["message"]  # still valid JSON
    assert "owned" in message
    assert "\x1b" not in as_json.stdout and "\x07" not in as_json.stdout


def test_a_changelog_record_with_control_characters_is_shown_safely(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """A record written by an older version (or by hand) holds raw control characters; its file is gone."""
    sync_client[project.db]["_mongoshift_migrations"].insert_one(
        {"name": "0009_gone\x1b[2J\x9bx.py", "status": "applied", "batch": 1, "checksum": "0" * 64}
    )
    piped = cli(project, "status")
    assert piped.returncode == 0, piped.stderr
    assert "0009_gone" in piped.stdout
    _no_hostile(piped.stdout + piped.stderr)
    code, text = run_on_terminal(project, "status")
    assert code == 0 and "0009_gone" in text
    _no_hostile(text)
    as_json = cli(project, "status", "--json")
    assert json.loads(as_json.stdout)["migrations"][0]["name"].startswith("0009_gone")
    assert "\x1b" not in as_json.stdout and "\x9b" not in as_json.stdout


# ---------------------------------------------------------------- item 20: -v shows the traceback

TRACEBACK_FAILURE = """
def helper(value):
    raise KeyError("missing field for mongodb://tb-user:tb-hunter11@10.1.1.1/")


def up(ctx):
    helper(1)
"""


def test_verbose_shows_the_migrations_traceback_redacted(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_trace.py", TRACEBACK_FAILURE)
    result = cli(project, "up", "-v")
    assert result.returncode == 7
    assert "Traceback" in result.stderr
    assert "0001_trace.py" in result.stderr and "line 7" in result.stderr and "line 3" in result.stderr
    assert "in helper" in result.stderr
    assert "tb-hunter11" not in result.stderr + result.stdout


def test_without_verbose_a_failure_is_one_line(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_trace.py", TRACEBACK_FAILURE)
    result = cli(project, "up")
    assert result.returncode == 7
    assert "Traceback" not in result.stderr and "line 3" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "0001_trace.py" in errors[0]
    assert "tb-hunter11" not in result.stderr


def test_verbose_with_json_keeps_one_document_on_stdout(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_trace.py", TRACEBACK_FAILURE)
    result = cli(project, "up", "-v", "--json")
    assert result.returncode == 7
    assert json.loads(result.stdout)["error"]["kind"] == "execution_failed"
    assert "Traceback" in result.stderr and "tb-hunter11" not in result.stdout + result.stderr


DUPLICATE_KEY_BUILT = """
async def up(ctx):
    await ctx.db.people.create_index("email", unique=True, name="email_unique")
    email = "-".join(["zebra", "7731"]) + "@leak.example"  # the source lines a traceback shows do not hold the value
    await ctx.db.people.insert_one({"email": email})
    await ctx.db.people.insert_one({"email": email})
"""


def test_verbose_traceback_of_a_server_error_holds_no_document_value(project, cli) -> None:  # type: ignore[no-untyped-def]
    """A driver error (a duplicate key) fails a migration: -v shows its traceback once, from the migration file's
    frames on (the README's promise), never a second time from mongoshift's own frames, and it ends with pymongo's
    text cleaned (``dup key: {...}`` and ``keyValue`` quote the document)."""
    project.add("0001_dup.py", DUPLICATE_KEY_BUILT)
    for args in (["up", "-v"], ["up", "-v", "--json"]):
        result = cli(project, *args)
        assert result.returncode == 7, result.stderr
        assert "DuplicateKeyError" in result.stderr and result.stderr.count("Traceback") == 1
        assert "0001_dup.py" in result.stderr.split("Traceback", 1)[1] and "executor.py" not in result.stderr
        assert "zebra-7731" not in result.stdout + result.stderr


def test_verbose_json_log_lines_stay_json_with_a_server_errors_traceback(project, cli) -> None:  # type: ignore[no-untyped-def]
    """``-v --log-format json``: the traceback of a failure caused by a driver error was printed as plain text
    among the JSON lines, so a log collector choked on it; every line is JSON, the traceback's redacted."""
    project.add("0001_dup.py", DUPLICATE_KEY_BUILT)
    result = cli(project, "up", "-v", "--log-format", "json")
    assert result.returncode == 7, result.stderr
    lines = [json.loads(line) for line in result.stderr.splitlines()]  # every line, none plain text
    assert [line["level"] for line in lines if "DuplicateKeyError" in json.dumps(line) and "Traceback" in json.dumps(line)] == ["debug"]
    assert "zebra-7731" not in result.stderr


def test_verbose_json_traceback_of_a_failure_not_logged_is_one_json_line(project, cli) -> None:  # type: ignore[no-untyped-def]
    """A failure no log line carried (the system refusing a folder name) gets its traceback from the command line
    under ``-v``: one JSON line under ``--log-format json``, plain text otherwise."""
    folder = "x" * 300
    plain = cli(project, "status", "--dir", folder, "-v")
    assert plain.returncode == 44 and "Traceback" in plain.stderr
    result = cli(project, "status", "--dir", folder, "-v", "--log-format", "json")
    assert result.returncode == 44, result.stderr
    lines = [json.loads(line) for line in result.stderr.splitlines()]
    (failure,) = [line for line in lines if line["message"] == "the failure's traceback"]
    assert "OSError" in failure["traceback"] and failure["level"] == "debug"


RAISES_ON_IMPORT = 'raise RuntimeError("cannot reach mongodb://admin:imp-hunter12@db.example.com/x with password=imp-hunter13")\n'


def test_a_secret_in_an_import_failure_stays_out_of_verbose_and_json_logs(project, tmp_path, cli) -> None:  # type: ignore[no-untyped-def]
    """A migration file or the hooks module that raises while it imports: its message reaches the
    error line, the ``--json`` error and the verbose logs' ``*_end`` events, each of them masked
    (the events carried it as raised)."""
    project.add("0001_a.py", RAISES_ON_IMPORT)
    seen = [cli(project, *args) for args in (["up"], ["-v", "up"], ["-v", "--log-format", "json", "up"], ["up", "--json", "-v"])]
    assert {r.returncode for r in seen} == {20}
    (tmp_path / "hooks_file.py").write_text(RAISES_ON_IMPORT)
    project.write_config(hooks=str(tmp_path / "hooks_file.py"))
    (project.root / "migrations" / "0001_a.py").write_text("def up(ctx):\n    pass\n")
    hooked = [cli(project, *args) for args in (["up"], ["-v", "up"], ["-v", "--log-format", "json", "up"])]
    assert {r.returncode for r in hooked} == {12}
    text = everything(*seen, *hooked)
    assert "imp-hunter12" not in text and "imp-hunter13" not in text
    assert "db.example.com" in text  # what is not secret stays readable
    events = [json.loads(line) for r in seen[2:3] + hooked[2:] for line in r.stderr.splitlines() if line.startswith("{")]
    assert any((e.get("data") or {}).get("error") for e in events)  # the end events carry the (masked) error


OWN_LOGGER = """
def up(ctx):
    ctx.logger.warning("connecting to mongodb://app:ownlogger-pw1@db.internal/prod with password=ownlogger-pw2")
    ctx.log.info("ready", password="ownlogger-pw3", user="app")
"""


def test_a_migrations_own_logger_lines_show_no_credentials(project, cli) -> None:  # type: ignore[no-untyped-def]
    """``ctx.logger`` is the migration's stdlib logger, printed on stderr by mongoshift: its lines went out as
    written, a URI's password included, in text and in ``--log-format json`` (stop 56, h5)."""
    project.add("0001_own.py", OWN_LOGGER)
    plain = cli(project, "up")
    assert plain.returncode == 0, plain.stderr
    assert "connecting to mongodb://***@db.internal/prod with password=***" in plain.stderr
    project.add("0002_own.py", OWN_LOGGER)
    as_json = cli(project, "up", "--json", "--log-format", "json")
    assert as_json.returncode == 0, as_json.stderr
    lines = [json.loads(line) for line in as_json.stderr.splitlines()]
    assert "connecting to mongodb://***@db.internal/prod with password=***" in [line["message"] for line in lines]
    for seen in (plain.stdout + plain.stderr, as_json.stdout + as_json.stderr):
        assert "ownlogger-pw" not in seen
