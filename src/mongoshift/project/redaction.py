"""Text that leaves mongoshift: no credential, no document value, no terminal control, bounded.

Error text is printed, returned in ``--json`` and stored (the changelog, background
state), and it often quotes what it must not: a connection string with its password,
the values a duplicate key error repeats, the documents a bulk write error carries.
:func:`redact` is the one place that cleans such text, :func:`describe_error` the
one place that turns an exception into it, and :func:`recorded_text` the one place that
checks a person's words a run records. Every layer calls them, so this module imports only
the standard library, the driver's error classes, :mod:`.wording` (which imports nothing)
and mongoshift's own errors (the bottom layer).
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Mapping
from types import CodeType, TracebackType
from typing import Any
from urllib.parse import parse_qsl, quote

from ..errors import ConfigInvalidError
from .wording import plural

#: Default bound of an error text (a migration may raise a message of any size).
LIMIT = 1000
MASK = "***"
REDACTED = "<redacted>"

# C0 controls except tab and newline, DEL, the C1 block (0x9b is a one-character CSI), and the
# bidirectional controls (U+202E shows the rest of a line reversed: a file name or an argument
# could make a message read as something else).
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_SURROGATES = re.compile(r"[\ud800-\udfff]")
# (a password may hold an apostrophe or a ``#``: the driver takes both unescaped, and ends the user information at
# the last ``@`` before the first ``/`` or ``?``, never at a ``#``)
_USERINFO = re.compile(r"(mongodb(?:\+srv)?://)[^/?\s\"<>]{0,512}@", re.IGNORECASE)
# key=value / key:value / 'key': 'value' pairs whose key names a secret: proxyPassword,
# tlsCertificateKeyFilePassword, sslPEMKeyPassword, AWS_SESSION_TOKEN (its ':' percent-encoded too), ... (bounded
# repetitions: the text may be anything a migration raised)
_SECRET_PAIR = re.compile(
    r"(?P<key>\b[\w.-]{0,64}?(?:password|secret|token)['\"]?\s*(?:[:=]|%3A)\s*['\"]?)(?P<value>[^,&\s'\"}\])]+)",
    re.IGNORECASE,
)
# pymongo appends the whole server reply (documents included) after this marker.
_FULL_ERROR = re.compile(r",? full error: .*$", re.MULTILINE)
# Markers whose following value is document data: the duplicate key, a write's document,
# a validation failure's details, a document id.
_VALUE_MARKERS = re.compile(
    r"(?:dup key:\s*|['\"]?\b(?:keyValue|errInfo|failingDocumentId)['\"]?\s*:\s*|['\"]op['\"]\s*:\s*|\b_id['\"]?\s*:\s*"
    r"|\bdocument with _id\s+)"
)
#: The opening of a document the server quotes whole, ``_id`` first as it stores it (an index build that failed on it:
#: ``Can't extract geo keys: { _id: ObjectId('…'), loc: … }``, ``point not in interval of [ -180, 180 ] :: caused by ::
#: { _id: … }``): the whole document is masked, not only its id.
_DOCUMENT_OPENING = re.compile(r"\{\s*['\"]?$")
#: A document's value that the server quotes to the end of its line: a text index's language override (17262).
_LINE_VALUE = re.compile(r"(\blanguage override unsupported:\s*)[^\n]+")
#: The index a duplicate key error names; a collated index's collation comes between its name and ``dup key``.
_INDEX_NAME = re.compile(r"\bindex: (\S+) (?:collation: \{[^{}]*\} )?dup key")
_SECRET_KEY = re.compile(r"(?:password|secret|token)$", re.IGNORECASE)


def mask_credentials(text: str) -> str:
    """``text`` with a URI's credentials and ``password=...`` / ``token: ...`` pairs masked, nothing else changed: for
    the lines of loggers mongoshift prints but does not write itself (a migration's ``ctx.logger``), whose other
    words are their author's."""
    return _SECRET_PAIR.sub(rf"\g<key>{MASK}", _USERINFO.sub(rf"\1{MASK}@", text))


def secret_name(name: str) -> bool:
    """Whether a key names a secret (``password``, ``dbPassword``, ``client_secret``, ``api_token``): its value is masked."""
    return bool(_SECRET_KEY.search(name))


def strip_controls(text: str) -> str:
    """``text`` without terminal control characters (tab and newline stay), its undecodable bytes
    shown (:func:`escape_undecodable`)."""
    return escape_undecodable(_CONTROLS.sub("", text))


def escape_undecodable(text: str) -> str:
    """``text`` with the bytes of a name that was not UTF-8 (a command-line argument, a file name:
    Python keeps them as lone surrogates, which no terminal, JSON reader or BSON string takes)
    written ``\\xff``."""
    if _SURROGATES.search(text) is None:
        return text
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no undecodable byte gives
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


#: The longest run of non-space characters an error shows whole (a path, a URI, a name).
LONGEST_WORD = 300
_LONG_WORD = re.compile(rf"\S{{{LONGEST_WORD + 1},}}")
_MAY_HOLD_SECRET = re.compile(r"@|://|password|secret|token", re.IGNORECASE)


def elide_long_words(text: str) -> str:
    """``text`` with each run of more than :data:`LONGEST_WORD` non-space characters (a 100 KB
    argument an error quotes back) cut to its start and end, so the words after it still show.
    A run that may hold a secret is replaced by its length instead: a cut could separate a
    password from what :func:`redact` recognizes it by."""

    def cut(match: re.Match[str]) -> str:
        word = match.group()
        if _MAY_HOLD_SECRET.search(word):
            return f"<{len(word)} characters>"
        return f"{word[:80]}…{word[-20:]}"

    return _LONG_WORD.sub(cut, text)


def cap(text: str, limit: int | None = LIMIT) -> str:
    if limit is None or len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)] + "…"


def redact(text: str, limit: int | None = LIMIT) -> str:
    """``text`` safe to show and store: credentials and secret URI options masked, document
    values quoted by server errors replaced, control characters dropped, at most ``limit``
    characters (``None``: unbounded, for tracebacks)."""
    text = str(text)
    if limit is not None:
        text = text[: limit * 8]  # bounds the work on a huge message; a value cut here is masked whole
    text = strip_controls(text)
    text = _USERINFO.sub(rf"\1{MASK}@", text)
    text = _SECRET_PAIR.sub(rf"\g<key>{MASK}", text)
    text = _FULL_ERROR.sub("", text)
    text = _LINE_VALUE.sub(rf"\1{REDACTED}", text)
    text = _mask_values(text)
    return cap(text, limit)


def _mask_values(text: str) -> str:
    out: list[str] = []
    position = 0
    for match in _VALUE_MARKERS.finditer(text):
        if match.start() < position:
            continue  # inside a value already masked
        opening = _DOCUMENT_OPENING.search(text, position, match.start()) if match.group().startswith("_id") else None
        if opening is not None:  # { _id: ..., the rest of the document }
            out.append(text[position : opening.start()])
            out.append("{ " + REDACTED + " }")
            position = _value_end(text, opening.start())
            continue
        end = _value_end(text, match.end())
        if text[end - 1 : end] == ":" and end - 1 > match.end():
            end -= 1  # "document with _id 5: reason": the colon is the message's, not the id's
        out.append(text[position : match.end()])
        out.append("{ " + REDACTED + " }" if text.startswith("{", match.end()) else REDACTED)
        position = end
    out.append(text[position:])
    return "".join(out)


def _value_end(text: str, i: int) -> int:
    """Where the value starting at ``i`` ends: a quoted string, a bracketed group (quotes
    inside respected), or a bare token; an unclosed value runs to the end of the text."""
    depth = 0
    quote: str | None = None
    while i < len(text):
        c = text[i]
        if quote is not None:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = None
                if depth == 0:
                    return i + 1
        elif c in "'\"":
            quote = c
        elif c in "{[(":
            depth += 1
        elif c in "}])":
            if depth == 0:
                return i
            depth -= 1
            if depth == 0:
                return i + 1
        elif depth == 0 and c in ",\n ":
            return i
        i += 1
    return len(text)


def describe_write_error(error: Mapping[str, Any]) -> str:
    """One write error of a server reply, without the document or the key values it quotes."""
    code = error.get("code")
    if code == 11000:
        pattern = error.get("keyPattern") or {}
        found = _INDEX_NAME.search(str(error.get("errmsg") or ""))
        index = f"index {strip_controls(found.group(1))}, " if found else ""
        return f"duplicate key on {', '.join(pattern) or 'a unique index'} ({index}11000)"
    if code == 121:
        return "document failed validation (121)"
    if code in (17419, 10334):
        return f"the document would be larger than 16 MiB ({code})"
    name = error.get("codeName")
    return f"write error {code}" + (f" {name}" if name else "")


def describe_error(exc: BaseException, limit: int | None = LIMIT) -> str:
    """``Type: what happened`` for any exception, through :func:`redact`.

    Server errors are described from their reply's code and message, never from the
    reply itself (a bulk write error carries the documents it failed to write)."""
    from pymongo.errors import OperationFailure  # start-up time: the CLI loads this module before the driver

    name = type(exc).__name__
    details = getattr(exc, "details", None)
    if isinstance(details, Mapping) and isinstance(details.get("writeErrors"), list):
        body = _bulk_text(details)
    elif isinstance(exc, OperationFailure):
        body = _failure_text(exc.code, details if isinstance(details, Mapping) else {}, str(exc))
    else:
        body = _message(exc)
    return redact(f"{name}: {body}" if body else name, limit)


def _message(exc: BaseException) -> str:
    """``str(exc)``; a user's exception whose ``__str__`` itself raises is described without its message,
    so that its migration is still recorded failed (the error reaching here crashed the run, exit 1)."""
    try:
        return str(exc)
    except Exception:
        return "(its message could not be read: its __str__ raised)"


#: A quoted literal in an exception's message: Python's own messages quote the value they failed on.
_QUOTED = re.compile(r"'(?:[^'\\\n]|\\.)*'" + r'|"(?:[^"\\\n]|\\.)*"')
#: Errors whose quoted text is a name (a missing key, attribute or module), not a value.
_NAMING = (KeyError, AttributeError, NameError, ImportError)


def recorded_text(option: str, value: object, limit: int) -> str | None:
    """A person's words a run records (a ``--reason``, a ``requested_by``): text of at most ``limit`` characters,
    on one line (each run of spaces, tabs and line breaks one space: the history and the dashboard show one
    line), with no credential and no control character (:func:`redact`). None stays None; an empty, over-long
    or non-text value is refused (exit 6, naming ``option``), never cut."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigInvalidError(f"{option} must be text, not {type(value).__name__}")
    if not value.strip():
        raise ConfigInvalidError(f"{option} must not be empty")
    if len(value) > limit:
        raise ConfigInvalidError(f"{option} is {len(value)} characters long: at most {limit}")
    return redact(" ".join(value.split()), limit)


def describe_transform_error(exc: BaseException, limit: int | None = LIMIT, document: Any = None) -> str:
    """:func:`describe_error` for what a transform raised on a document, with every quoted literal of
    its message masked: Python's own messages quote the value they choke on (``int(doc["email"])``:
    ``invalid literal for int() with base 10: 'u5987@x.com'``), and a document's values are never
    stored or shown. A missing key, attribute or module keeps its name: it is one, not a value; a
    ``TypeError`` keeps the type names it quotes (:data:`_TYPE_NAMES`).

    ``document`` is the document the transform was given, as read: a name that is one of its
    values is masked after all. A lookup keyed by a document's value (``prices[doc["sku"]]``)
    raises a ``KeyError`` that quotes that value, not a name. So does one keyed by a value worked
    out from it (``prices[doc["sku"].lower()]``), which no document value equals: a raised
    ``KeyError`` keeps its key only when the code it passed through names that key
    (:func:`_named_by_code`: ``doc["email"]``, ``config[7]``)."""
    if isinstance(exc, _NAMING):
        if isinstance(exc, KeyError) and len(exc.args) == 1 and not _named_by_code(exc.args[0], exc.__traceback__):
            return _masked_key(exc, limit)
        text = describe_error(exc, None if document is not None else limit)
        if document is None:
            return text
        values = _document_values(document)
        if not values:
            return cap(text, limit)
        if isinstance(exc, KeyError) and len(exc.args) == 1 and _is_value(exc.args[0], values):
            return _masked_key(exc, limit)

        def mask_value(quoted: re.Match[str]) -> str:
            text = quoted.group(0)
            return f"{text[0]}{MASK}{text[0]}" if text[1:-1] in values else text

        return cap(_QUOTED.sub(mask_value, text), limit)
    keep_types = isinstance(exc, TypeError)

    def mask(quoted: re.Match[str]) -> str:
        text = quoted.group(0)
        if keep_types and text[1:-1] in _TYPE_NAMES:
            return text
        # Python's "'MigrationLog' object is not callable": the quoted name before " object" is a type's, whatever
        # class it is (a project's, mongoshift's), never a value; it read "'***' object is not callable"
        if keep_types and text[1:-1].isidentifier() and quoted.string.startswith(" object", quoted.end()):
            return text
        return f"{text[0]}***{text[0]}"

    described = _QUOTED.sub(mask, describe_error(exc, None))
    if document is not None:  # the transform's own words may hold a value unquoted: f"bad email {doc['email']}"
        described = _mask_unquoted(described, _document_values(document))
    return cap(described, limit)


#: A document value shorter than this is left in a message unquoted: "1" or "en" would mask parts of its words.
_UNQUOTED_MIN = 4


def _mask_unquoted(text: str, values: set[Any]) -> str:
    """``text`` with every document value of at least :data:`_UNQUOTED_MIN` characters (its text: a string, or the
    ``str`` of a number, date or id) that it holds as a word of its own replaced by ``***``, the longest first (a
    value ``"None"`` leaves ``NoneType`` alone)."""
    texts = sorted({v for v in values if isinstance(v, str) and len(v) >= _UNQUOTED_MIN}, key=len, reverse=True)
    for value in texts:
        text = re.sub(rf"(?<!\w){re.escape(value)}(?!\w)", MASK, text)
    return text


def _masked_key(exc: KeyError, limit: int | None) -> str:
    masked = f"'{MASK}'" if isinstance(exc.args[0], str) else MASK  # ``counts[doc["age"]]``: ``KeyError: 42``
    return cap(f"{type(exc).__name__}: {masked}", limit)


def _named_by_code(key: Any, traceback: TracebackType | None) -> bool:
    """Whether ``key`` is named by the code a raised exception passed through: a constant of a frame of its
    traceback (or of a function defined inside one), ``doc["email"]``; or a module-level constant of
    that frame's module (a string or number, or one in a tuple, list or set), ``doc[EMAIL]``. A key
    worked out at run time from a document's values is named by no code. An exception never raised
    (no traceback) gives no code to ask: its key is taken as a name."""
    if traceback is None:
        return True
    kind = type(key)
    if kind not in (str, int):
        return False  # a tuple, bytes, a float, an ObjectId... as keys: made from values, not names
    codes: list[CodeType] = []
    modules: dict[int, dict[str, Any]] = {}
    while traceback is not None:
        codes.append(traceback.tb_frame.f_code)
        modules.setdefault(id(traceback.tb_frame.f_globals), traceback.tb_frame.f_globals)
        traceback = traceback.tb_next
    for names in modules.values():
        for value in list(names.values()):
            items = value if type(value) in (tuple, list, set, frozenset) else (value,)
            if any(type(item) is kind and item == key for item in items):
                return True
    seen: set[int] = set()
    while codes:
        code = codes.pop()
        if id(code) in seen:
            continue
        seen.add(id(code))
        constants: list[Any] = list(code.co_consts)
        while constants:
            constant = constants.pop()
            if type(constant) is type(key) and constant == key:
                return True
            if isinstance(constant, (tuple, frozenset)):
                constants.extend(constant)  # ``in ("a", "b")``, ``{"a", "b"}``
            elif isinstance(constant, CodeType):
                codes.append(constant)  # a lambda's or a nested function's
    return False


def _document_values(document: Any) -> set[Any]:
    """The scalar values held anywhere in ``document`` (hashable ones), and each one's ``repr`` and
    ``str``: what a ``KeyError`` or another naming error would quote if it quoted one of them."""
    found: set[Any] = set()
    stack = [document]
    while stack:
        value = stack.pop()
        if isinstance(value, Mapping):
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
        elif value is not None and not isinstance(value, bool):
            try:
                found.add(value)
            except TypeError:  # an unhashable value of some other kind: compared by its text below
                pass
            if isinstance(value, str):
                continue
            try:
                found.add(str(value))
            except Exception:
                pass
    return found


def _is_value(key: Any, values: set[Any]) -> bool:
    try:
        return key in values or str(key) in values
    except Exception:
        return True  # a key that cannot even be compared or shown is masked


#: The types a decoded document's values and a transform's own objects have: a TypeError quotes
#: them (``'NoneType' object is not subscriptable``, ``unsupported operand type(s) for +: 'int' and
#: 'str'``), and without them its message tells nothing. Builtin types, NoneType and the types
#: BSON decodes to; any other quoted text of a TypeError is masked like a value.
_TYPE_NAMES = frozenset(
    [name for name, value in vars(builtins).items() if isinstance(value, type) and not name.startswith("_")]
    + ["NoneType", "NotImplementedType", "ellipsis", "function", "builtin_function_or_method", "method", "generator", "coroutine", "module"]
    + ["datetime", "date", "time", "timedelta", "Decimal", "UUID", "ObjectId", "Int64", "Decimal128", "Binary", "Timestamp"]
    + ["Regex", "Code", "DBRef", "MinKey", "MaxKey", "SON", "RawBSONDocument", "Pattern"]
)


#: Server errors about a document's geo value that a 2dsphere or 2d index cannot take: their reason quotes the
#: document or its coordinates (``Can't extract geo keys: { _id: …, loc: … }  longitude/latitude is out of bounds,
#: lng: 200 lat: 100``), so only the code is shown. From 9.0 the code is named ``GeoKeyExtractionFailed``.
_GEO_VALUE_CODES = frozenset({16755, 16756, 13026, 13027})


def _failure_text(code: Any, details: Mapping[str, Any], fallback: str) -> str:
    if code in (11000, 121):
        return describe_write_error({**details, "code": code})
    errmsg = details.get("errmsg")
    message = errmsg.strip() if isinstance(errmsg, str) and errmsg.strip() else fallback
    label = " ".join(str(part) for part in (code, details.get("codeName")) if part is not None)
    if code in _GEO_VALUE_CODES or str(details.get("codeName") or "").startswith("GeoKeyExtractionFailed"):
        return f"{label}: a geo value that cannot be indexed (the server's message quotes the document: not shown)"
    return f"{label}: {message}" if label else str(message)


def _bulk_text(details: Mapping[str, Any]) -> str:
    errors = [e for e in details["writeErrors"] if isinstance(e, Mapping)]
    described = list(dict.fromkeys(describe_write_error(e) for e in errors))
    parts = [f"{plural(len(errors), 'write error')}: " + "; ".join(described[:3]) + (f"; {len(described) - 3} more" if len(described) > 3 else "")]
    for concern in details.get("writeConcernErrors") or []:
        if isinstance(concern, Mapping):
            parts.append(f"write concern error {concern.get('code')} {concern.get('codeName') or ''}".rstrip())
    return "; ".join(parts)


# ---------------------------------------------------------------- connection strings


def uri_secrets(uri: str) -> list[str]:
    """What in ``uri`` is secret (``password``, option names), to warn about it."""
    found: list[str] = []
    rest = uri.split("://", 1)[-1]
    authority = _authority(rest)
    if "@" in authority and ":" in authority.rsplit("@", 1)[0]:
        found.append("password")
    query = rest.split("?", 1)[1] if "?" in rest else ""
    for key, value in parse_qsl(query.split("#", 1)[0], keep_blank_values=True):
        if _SECRET_KEY.search(key) or (key.lower() == "authmechanismproperties" and _secret_properties(value)):
            found.append(key)
    return found


def _authority(rest: str) -> str:
    """The hosts and user information of a URI without its scheme, as the driver reads them: up to the first
    ``/`` or ``?``. A ``#`` ends nothing there: the driver takes ``user:pa#ss@host`` as the password ``pa#ss``."""
    return re.split(r"[/?]", rest, maxsplit=1)[0]


def _secret_properties(value: str) -> list[str]:
    return [pair for pair in value.split(",") if _SECRET_KEY.search(pair.split(":", 1)[0])]


def without_secrets(uri: str) -> str:
    """``uri`` without its user information and secret options: safe to write into a file
    that is committed (the full URI belongs in ``MONGOSHIFT_URI``)."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return uri
    parts = re.match(r"([^/?]*)(.*)", rest, re.DOTALL)  # the authority as the driver reads it (_authority)
    assert parts is not None  # both groups match the empty string: any text matches
    authority, tail = parts.groups()
    authority = authority.rsplit("@", 1)[-1]
    path, qmark, query = tail.partition("?")
    if not qmark:
        return f"{scheme}://{authority}{tail}"
    query, hash_, fragment = query.partition("#")
    kept: list[str] = []
    for key, value in parse_qsl(query, keep_blank_values=True):
        if _SECRET_KEY.search(key):
            continue
        if key.lower() == "authmechanismproperties":
            secret = _secret_properties(value)
            value = ",".join(p for p in value.split(",") if p not in secret)
            if not value:
                continue
        kept.append(f"{key}={quote(value, safe=':,/@$')}")
    query_text = "?" + "&".join(kept) if kept else ""
    return f"{scheme}://{authority}{path}{query_text}{hash_}{fragment}"
