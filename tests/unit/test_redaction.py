"""The one redaction of error text, and the places that must go through it."""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import pytest
from pymongo.errors import (
    BulkWriteError,
    DuplicateKeyError,
    OperationFailure,
    WriteError,
)

from mongoshift.cli.output import Output
from mongoshift.errors import ExecutionFailedError
from mongoshift.project.connection import auth_failure, auth_summary
from mongoshift.project.redaction import (
    LIMIT,
    cap,
    describe_error,
    describe_transform_error,
    describe_write_error,
    redact,
    strip_controls,
    uri_secrets,
    without_secrets,
)

E11000 = 'E11000 duplicate key error collection: app.users index: email_1 dup key: { email: "ali}ce@example.com" }'


# ---------------------------------------------------------------- credentials and secret options


@pytest.mark.parametrize(
    ("text", "gone", "kept"),
    [
        ("failed: mongodb://ci:sup3r@h1:27017,h2/db", "sup3r", "h1:27017,h2/db"),
        ("mongodb+srv://user:pa@ss@cluster.example.com/db", "pa@ss", "cluster.example.com/db"),
        ("a mongodb://u:one@h b mongodb://u:two@h", "one", "b mongodb://"),
        ("mongodb://:pw-only@host/db", "pw-only", "host/db"),
        ("mongodb://h/db?proxyPassword=hunter2&retryWrites=true", "hunter2", "retryWrites=true"),
        ("mongodb://h/?tlsCertificateKeyFilePassword=pemPw&tls=true", "pemPw", "tls=true"),
        ("mongodb://h/?sslPEMKeyPassword=legacy", "legacy", "sslPEMKeyPassword="),
        (
            "mongodb://h/?authMechanismProperties=SERVICE_NAME:mongodb,AWS_SESSION_TOKEN:FQoGtoken&w=1",
            "FQoGtoken",
            "SERVICE_NAME:mongodb,AWS_SESSION_TOKEN:",
        ),
        ("options {'proxypassword': 'dict-form', 'w': 1}", "dict-form", "'w': 1"),
        ("failed: mongodb://app:it's-secret@h/db", "secret", "h/db"),  # an apostrophe is a valid password character
        ("mongodb://h/?authMechanismProperties=AWS_SESSION_TOKEN%3AFQoGtoken&w=1", "FQoGtoken", "&w=1"),  # the driver decodes %3A
    ],
)
def test_secrets_in_connection_strings_are_masked(text: str, gone: str, kept: str) -> None:
    masked = redact(text)
    assert gone not in masked
    assert kept in masked


def test_a_uri_without_secrets_is_left_alone() -> None:
    text = "connect to mongodb://localhost:27017/db?replicaSet=rs0 failed"
    assert redact(text) == text


# ---------------------------------------------------------------- document values


def test_duplicate_key_values_are_masked_and_the_index_kept() -> None:
    masked = redact(E11000)
    assert "alice" not in masked and "ali}ce" not in masked
    assert masked.endswith("index: email_1 dup key: { <redacted> }")
    compound = redact('... dup key: { a: "x}y", b: { c: 1 } } then more')
    assert compound == "... dup key: { <redacted> } then more"


def test_the_full_server_reply_is_cut_and_quoted_documents_masked() -> None:
    text = "batch op errors occurred, full error: {'writeErrors': [{'op': {'email': 'doc-value'}}]}"
    assert redact(text) == "batch op errors occurred"
    shown = redact("{'keyValue': {'email': 'kv-value'}, 'op': {'n': 'op-value'}, '_id': ObjectId('65aa'), 'code': 11000}")
    assert "kv-value" not in shown and "op-value" not in shown and "65aa" not in shown and "'code': 11000" in shown


def test_a_multi_line_text_keeps_its_other_lines() -> None:
    text = f"Traceback:\n  File x.py, line 3\nDuplicateKeyError: {E11000}, full error: {{'keyValue': 1}}\nnext"
    lines = redact(text, limit=None).split("\n")
    assert lines[1] == "  File x.py, line 3" and lines[3] == "next" and "alice" not in lines[2]


def test_duplicate_key_error_is_described_by_code_and_index() -> None:
    exc = DuplicateKeyError(
        E11000, 11000, {"index": 0, "code": 11000, "errmsg": E11000, "keyPattern": {"email": 1}, "keyValue": {"email": "ali}ce@example.com"}}
    )
    assert describe_error(exc) == "DuplicateKeyError: duplicate key on email (index email_1, 11000)"


def test_a_collated_indexs_duplicate_key_error_still_names_the_index() -> None:
    """mongod quotes the collation between the index's name and ``dup key``: the name was lost."""
    message = (
        'Index build failed: E11000 duplicate key error collection: app.users index: by_email collation: { locale: "en", '
        'strength: 2, version: "57.1" } dup key: { email: "CollationKey(0x29ab)" }'
    )
    exc = DuplicateKeyError(message, 11000, {"code": 11000, "errmsg": message, "keyPattern": {"email": 1}, "keyValue": {"email": "29ab"}})
    assert describe_error(exc) == "DuplicateKeyError: duplicate key on email (index by_email, 11000)"


def test_bulk_write_error_is_described_without_its_documents() -> None:
    details = {
        "writeErrors": [
            {
                "index": 1,
                "code": 11000,
                "errmsg": E11000,
                "keyPattern": {"email": 1},
                "keyValue": {"email": "bulk-value"},
                "op": {"email": "bulk-value", "secret": "s"},
            },
            {"index": 2, "code": 121, "errmsg": "Document failed validation", "errInfo": {"details": "v"}, "op": {"x": "other-value"}},
        ],
        "writeConcernErrors": [],
        "nInserted": 1,
    }
    text = describe_error(BulkWriteError(details))
    assert "bulk-value" not in text and "other-value" not in text
    assert text == "BulkWriteError: 2 write errors: duplicate key on email (index email_1, 11000); document failed validation (121)"


INDEX_BUILD = "Index build failed: 6cb4e045: Collection shop.places ( a823cebb ) :: caused by :: "


@pytest.mark.parametrize(
    ("code", "reason", "shown"),
    [
        # mongod 5.0-8.0 quote the whole document, _id first, then the reason with the coordinates
        (16755, "Can't extract geo keys: { _id: ObjectId('67c5ba19'), name: \"Alice's } home\", loc: { type: \"Point\", "
         "coordinates: [ 200.0, 100.0 ] } }  longitude/latitude is out of bounds, lng: 200 lat: 100",
         "16755 Location16755: a geo value that cannot be indexed (the server's message quotes the document: not shown)"),
        (13027, "point not in interval of [ -180, 180 ] :: caused by :: { _id: 5, desc: \"Alice's home\", at: [ 500.0, 500.0 ] }",
         "13027 Location13027: a geo value that cannot be indexed"),
        # a text index on a collection whose documents hold an unsupported language
        (17262, "language override unsupported: Alice's tongue", "language override unsupported: <redacted>"),
        # an error that quotes a document, whatever its code
        (2, "cannot index { _id: \"alice@example.com\", name: \"Alice's name\" } here", "cannot index { <redacted> } here"),
        # newer servers name the document by its _id only
        (2, "Could not extract keys at path 'loc' for document with _id \"alice@example.com\": out of bounds",
         "for document with _id <redacted>: out of bounds"),
        (2, "Could not extract keys at path 'loc' for document with _id 42: out of bounds", "for document with _id <redacted>: out of bounds"),
    ],
)
def test_an_index_builds_failure_does_not_show_the_document_it_failed_on(code: int, reason: str, shown: str) -> None:
    """The server quotes the document (or its id, or a value) that its index build failed on; only its _id was masked."""
    message = INDEX_BUILD + reason
    exc = OperationFailure(message, code, {"ok": 0, "errmsg": message, "code": code, "codeName": f"Location{code}"})
    text = describe_error(exc)
    assert shown in text
    for value in ("Alice", "alice", "200", "500", "42", "67c5ba19"):
        assert value not in text


def test_other_server_errors_keep_code_name_and_message() -> None:
    exc = OperationFailure("not allowed", 13, {"ok": 0, "errmsg": "not allowed", "code": 13, "codeName": "Unauthorized"})
    assert describe_error(exc) == "OperationFailure: 13 Unauthorized: not allowed"
    assert describe_error(WriteError("failed", 121, {"code": 121, "errmsg": "Document failed validation", "errInfo": {"v": 1}})) == (
        "WriteError: document failed validation (121)"
    )


def test_background_write_errors_keep_their_masking() -> None:
    """The background engine's per-document text, now from this module."""
    assert describe_write_error({"code": 11000, "keyPattern": {"a": 1, "b": 1}, "keyValue": {"a": 1}}) == "duplicate key on a, b (11000)"
    assert describe_write_error({"code": 11000}) == "duplicate key on a unique index (11000)"
    assert describe_write_error({"code": 121, "errInfo": {"x": 1}}) == "document failed validation (121)"
    assert describe_write_error({"code": 14, "errmsg": "value 'leak' of _id: 5"}) == "write error 14"


def test_background_batch_uses_the_shared_redaction() -> None:
    from mongoshift.background.write import batch

    assert batch.describe_transform_error is describe_transform_error and batch.describe_write_error is describe_write_error


def test_a_transforms_error_keeps_names_and_masks_quoted_values() -> None:
    def raised(fn):  # type: ignore[no-untyped-def]
        try:
            fn()
        except Exception as exc:
            return describe_transform_error(exc)
        raise AssertionError("it did not raise")

    assert raised(lambda: int("u5987@x.com")) == "ValueError: invalid literal for int() with base 10: '***'"
    assert raised(lambda: {}["email"]) == "KeyError: 'email'"
    assert raised(lambda: float("a\\'b")) == "ValueError: could not convert string to float: \"***\""
    assert raised(lambda: (_ for _ in ()).throw(ValueError("mongodb://u:pw@h/x is 'bad'"))) == "ValueError: mongodb://***@h/x is '***'"

    # a TypeError says which types met: the type names it quotes are kept, nothing else it quotes
    assert raised(lambda: int(None)) == "TypeError: int() argument must be a string, a bytes-like object or a real number, not 'NoneType'"  # type: ignore[arg-type]
    nothing: Any = None  # a literal None["name"] is a SyntaxWarning at compile time
    assert raised(lambda: nothing["name"]) == "TypeError: 'NoneType' object is not subscriptable"
    assert raised(lambda: 1 + "a") == "TypeError: unsupported operand type(s) for +: 'int' and 'str'"  # type: ignore[operator]
    assert raised(lambda: (_ for _ in ()).throw(TypeError("bad 'u5987@x.com' and 'ObjectId'"))) == "TypeError: bad '***' and 'ObjectId'"
    assert raised(lambda: (_ for _ in ()).throw(ValueError("not 'int'"))) == "ValueError: not '***'"


# ---------------------------------------------------------------- control characters and size


@pytest.mark.parametrize("code", [0x00, 0x07, 0x08, 0x0B, 0x0D, 0x1B, 0x1F, 0x7F, 0x80, 0x90, 0x9B, 0x9D, 0x9F])
def test_controls_are_stripped(code: int) -> None:
    assert strip_controls(f"a{chr(code)}b") == "ab"
    assert redact(f"a{chr(code)}b") == "ab"


def test_tab_newline_and_text_are_kept() -> None:
    assert strip_controls("a\tb\nc é ✓") == "a\tb\nc é ✓"


def test_everything_is_capped() -> None:
    assert len(redact("x" * 5000)) == LIMIT and redact("x" * 5000).endswith("…")
    assert len(describe_error(ValueError("y" * 50_000))) == LIMIT
    assert cap("short") == "short" and redact("z" * 5000, limit=None) == "z" * 5000


def test_a_migrations_own_message_is_redacted() -> None:
    exc = RuntimeError(f"copy failed for mongodb://u:p4ss@h/ {E11000}\x1b[2J")
    text = describe_error(exc)
    assert "p4ss" not in text and "alice" not in text and "\x1b" not in text
    assert text.startswith("RuntimeError: copy failed for mongodb://***@h/ E11000")


# ---------------------------------------------------------------- init and the project file


def test_without_secrets_keeps_hosts_and_harmless_options() -> None:
    uri = "mongodb://deploy:pw@h1:27017,h2/app?authSource=admin&proxyPassword=p&authMechanismProperties=SERVICE_NAME:s,AWS_SESSION_TOKEN:t&w=majority"
    assert without_secrets(uri) == "mongodb://h1:27017,h2/app?authSource=admin&authMechanismProperties=SERVICE_NAME:s&w=majority"
    assert without_secrets("mongodb+srv://u:p@c.example.com/db?authMechanismProperties=AWS_SESSION_TOKEN:t") == "mongodb+srv://c.example.com/db"
    assert without_secrets("mongodb://localhost:27017") == "mongodb://localhost:27017"


def test_a_password_holding_a_hash_is_a_password_to_every_helper() -> None:
    # the driver reads "user:pa#ss@host" as the password "pa#ss": "#" ends nothing before the hosts
    uri = "mongodb://u:pa#hunter12@h1:27017/app?w=1"
    assert without_secrets(uri) == "mongodb://h1:27017/app?w=1"
    assert uri_secrets(uri) == ["password"]
    assert redact(f"failed: {uri}") == "failed: mongodb://***@h1:27017/app?w=1"
    assert redact("mongodb://u:pa#hunter12@h") == "mongodb://***@h"


def test_uri_secrets_names_what_is_secret() -> None:
    assert uri_secrets("mongodb://u:p@h/?proxyPassword=x") == ["password", "proxyPassword"]
    assert uri_secrets("mongodb://x509user@h/?authMechanism=MONGODB-X509") == []
    assert uri_secrets("mongodb://h/?authMechanismProperties=AWS_SESSION_TOKEN:t") == ["authMechanismProperties"]
    assert uri_secrets("mongodb://h/?replicaSet=rs0") == []


# ---------------------------------------------------------------- refused credentials


def test_code_18_is_an_authentication_failure() -> None:
    exc = OperationFailure("Authentication failed.", 18, {"ok": 0.0, "errmsg": "Authentication failed.", "code": 18, "codeName": "AuthenticationFailed"})
    assert auth_failure(exc)


def test_other_failures_are_not_authentication_failures() -> None:
    assert not auth_failure(OperationFailure("not primary", 10107, {"errmsg": "not primary", "code": 10107}))
    assert not auth_failure(OperationFailure("command failed", None, {"errmsg": "command failed"}))
    assert not auth_failure(ValueError("Authentication failed"))


def test_auth_summary_names_mechanism_and_source_never_the_user() -> None:
    assert auth_summary("mongodb://alice:pw@h/app") == ("default (SCRAM)", "app")
    assert auth_summary("mongodb://alice:pw@h/?authSource=ops&authMechanism=SCRAM-SHA-256") == ("SCRAM-SHA-256", "ops")
    assert auth_summary("mongodb://alice@h/app?authMechanism=MONGODB-X509") == ("MONGODB-X509", "$external")


# ---------------------------------------------------------------- what the Output class prints

HOSTILE = "name\x1b[2J\x9b\x1b]0;title\x07end"


@pytest.fixture(params=["piped", "terminal"])
def output(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Output:
    """An Output on captured streams, as on a pipe or (rich forced) as on a terminal."""
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "300")
    if request.param == "terminal":
        monkeypatch.setenv("FORCE_COLOR", "1")
    else:
        monkeypatch.delenv("FORCE_COLOR", raising=False)
        monkeypatch.setenv("TTY_COMPATIBLE", "0")
    out = Output()
    assert out.out.is_terminal is (request.param == "terminal")
    return out


def test_output_strips_controls_from_every_kind_of_text(output: Output, capsys: pytest.CaptureFixture[str]) -> None:
    output.say(HOSTILE)
    output.warn(HOSTILE)
    output.error(ExecutionFailedError(HOSTILE))
    output.table([HOSTILE], [[HOSTILE]], title=HOSTILE)
    logging.getLogger("mongoshift").getChild("0001_x").warning(HOSTILE)
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert text.count("name[2J]0;titleend") >= 5  # said, warned, error, table, log line
    for sequence in ("\x1b[2J", "\x9b", "\x1b]0;", "\x07"):
        assert sequence not in text


def test_json_output_escapes_controls_and_stays_valid(capsys: pytest.CaptureFixture[str]) -> None:
    out = Output(json_mode=True)
    out.json({"name": HOSTILE})
    text = capsys.readouterr().out
    assert "\x1b" not in text and "\x9b" not in text and "\x07" not in text
    assert json.loads(text)["name"] == HOSTILE


def test_log_lines_with_a_traceback_are_stripped() -> None:
    stream = io.StringIO()
    Output()  # installs the handler
    logger = logging.getLogger("mongoshift")
    handler = logger.handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(stream)
    try:
        raise ValueError(f"in \x1b[2J traceback \x9b mongodb://u:log-hunter@h/ {E11000}")
    except ValueError:
        logger.exception("failed \x1b]0;x\x07")
    text = stream.getvalue()
    assert "\x1b" not in text and "\x9b" not in text and "traceback" in text
    assert "log-hunter" not in text and "alice" not in text and "dup key: { <redacted> }" in text


def test_code_334_is_an_auth_failure_only_in_the_handshake() -> None:
    from mongoshift.errors import AuthFailedError
    from mongoshift.project.server_errors import from_pymongo

    exc = OperationFailure("too large", 334, {"errmsg": "too large", "code": 334})
    assert auth_failure(exc, handshake=True) and not auth_failure(exc)
    assert not isinstance(from_pymongo(exc), AuthFailedError)


#: A module-level name for a field, as a migration file may keep one.
ABSENT_FIELD = "absent_field"
LOOKUP_FIELDS = ("listed_field",)


def _raised(fn: Any) -> BaseException:
    try:
        fn()
    except BaseException as exc:
        return exc
    raise AssertionError("it did not raise")


def test_a_raised_key_errors_key_stays_only_when_the_code_names_it() -> None:
    """A key worked out from a value (``prices[doc["sku"].lower()]``) is equal to none of the document's values,
    yet it is one: a raised ``KeyError`` keeps its key only when the code it passed through names it."""
    doc: dict[str, Any] = {"_id": 1, "sku": "A-17", "n": 40}
    prices: dict[Any, int] = {}

    def helper(d: dict[str, Any]) -> Any:
        return d["helper_field"]

    derived = _raised(lambda: prices[doc["sku"].lower()])
    assert describe_transform_error(derived, document=doc) == "KeyError: '***'"
    assert describe_transform_error(derived) == "KeyError: '***'"  # the migration line's up/down: no document
    assert describe_transform_error(_raised(lambda: prices[doc["n"] * 3]), document=doc) == "KeyError: ***"
    assert describe_transform_error(_raised(lambda: doc["missing_field"]), document=doc) == "KeyError: 'missing_field'"
    assert describe_transform_error(_raised(lambda: doc[ABSENT_FIELD]), document=doc) == "KeyError: 'absent_field'"
    assert describe_transform_error(_raised(lambda: doc[LOOKUP_FIELDS[0]]), document=doc) == "KeyError: 'listed_field'"
    assert describe_transform_error(_raised(lambda: helper(doc)), document=doc) == "KeyError: 'helper_field'"
    assert describe_transform_error(_raised(lambda: prices[9]), document=doc) == "KeyError: 9"
    assert describe_transform_error(_raised(lambda: prices[(1, 2)]), document=doc) == "KeyError: ***"


def test_a_naming_errors_quoted_value_of_the_document_is_masked() -> None:
    """A name is kept, but not when it is one of the document's values: ``prices[doc["sku"]]`` quotes the value."""
    doc = {"_id": 1, "sku": "A-17", "inner": {"tags": ["x\ny", 42]}, "quote": "it's"}
    assert describe_transform_error(KeyError("A-17"), document=doc) == "KeyError: '***'"
    assert describe_transform_error(KeyError("x\ny"), document=doc) == "KeyError: '***'"  # its repr escapes the newline
    assert describe_transform_error(KeyError("it's"), document=doc) == "KeyError: '***'"  # its repr is in double quotes
    assert describe_transform_error(KeyError(42), document=doc) == "KeyError: ***"
    assert describe_transform_error(KeyError("email"), document=doc) == "KeyError: 'email'"
    assert describe_transform_error(KeyError(7), document=doc) == "KeyError: 7"
    assert describe_transform_error(AttributeError("'dict' object has no attribute 'A-17'"), document=doc) == (
        "AttributeError: 'dict' object has no attribute '***'"
    )
    assert describe_transform_error(KeyError("A-17")) == "KeyError: 'A-17'"  # without a document, nothing to compare with


def test_recorded_words_are_one_line_without_controls_or_secrets() -> None:
    """A ``--reason`` kept its line breaks (the history and the dashboard show one line); ESC was stripped alone."""
    from mongoshift.errors import ConfigInvalidError
    from mongoshift.project.redaction import recorded_text

    assert recorded_text("--reason", "  a\x1b[31mred\nline\r\n\tend  ", 512) == "a[31mred line end"
    assert recorded_text("--reason", "from mongodb://u:p4ss@h/db", 512) == "from mongodb://***@h/db"
    assert recorded_text("--reason", None, 512) is None
    for bad, says in (("", "must not be empty"), (" \n ", "must not be empty"), (7, "must be text, not int"), ("x" * 513, "at most 512")):
        with pytest.raises(ConfigInvalidError, match=says):
            recorded_text("--reason", bad, 512)


def test_a_transforms_own_message_loses_the_documents_values_it_holds_unquoted() -> None:
    """``raise ValueError(f"bad email {doc['email']}")`` in a background transform was stored and shown as
    "bad email secret@example.com" (``background status``, the dashboard): only quoted literals were masked.
    A value of the document that the message holds as a word of its own is masked too; short values and parts of
    words (a value "None" inside "NoneType") stay."""
    doc: dict[str, Any] = {"_id": 7, "email": "secret@example.com", "state": "None", "code": "en", "seen": 20261231}
    said = describe_transform_error(ValueError(f"bad email {doc['email']} (seen {doc['seen']}, {doc['code']})"), document=doc)
    assert said == "ValueError: bad email *** (seen ***, en)", said
    typed = describe_transform_error(TypeError("'NoneType' object is not subscriptable"), document=doc)
    assert typed == "TypeError: 'NoneType' object is not subscriptable", typed


def test_a_type_error_keeps_the_name_of_any_class_it_says_an_object_of() -> None:
    """``ctx.log("...")`` in a migration failed as "TypeError: '***' object is not callable": only builtin and BSON
    type names were kept. A quoted name followed by " object" in a TypeError is a type's, whatever its class."""
    class MigrationLog:
        pass

    assert describe_transform_error(_raised(lambda: MigrationLog()())) == "TypeError: 'MigrationLog' object is not callable"
    assert describe_transform_error(TypeError("'hunter2 x' object is not callable")) == "TypeError: '***' object is not callable"
    assert describe_transform_error(TypeError("no use for 'secret' here")) == "TypeError: no use for '***' here"
