"""Writing a declaration file people read and edit, and updating one without losing what they wrote.

One writer serves both cases: a new file is the header's comments edited from nothing to the
declaration, and an existing file is its own text edited from what it declares to the merged
declaration. So a part added to a hand-commented file looks exactly like that part in a new
file, and there is one layout to keep right, not two that drift apart.

The text is edited with ``tomlkit``, which keeps what it was not told to change: comments,
blank lines, key order, quoting, a list's line breaks. Only the parts whose value changed are
touched: a key replaced (its inline comment stays), added or removed; an index entry of
``indexes`` replaced, added or removed by name; a ``required`` entry added or removed; a
validator property's table edited key by key. Comment lines just above a table header (after a
blank line) are that header's: a removed table takes them, a new table is put before them, and
the comments closing the file stay. New values are written in the generated layout:
tables for the validator (a header only where a table holds a value), ``indexes`` one entry a
line, everything else inline.

TOML has no null: a declaration that holds one cannot be written and says where.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, MutableMapping
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import Array, Comment, Item, Table, Whitespace

from ..errors import ModelsInvalidError
from .merge import canonical, index_name

BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")

#: Put before and after a new table: a blank line there unless the text already has one (a TOML
#: text never holds a NUL, so the mark cannot meet one of the file's own characters).
_BOUNDARY = "\x00"
_BOUNDARIES = re.compile("[\n\x00]*\x00[\n\x00]*")
_LONE_LF = re.compile("(?<!\r)\n")


def key(name: str) -> str:
    return name if BARE_KEY.match(name) else json.dumps(name, ensure_ascii=False)


def value(item: Any, where: str) -> str:
    """One value inline (tables as ``{ a = 1 }``)."""
    if item is None:
        raise ModelsInvalidError(f"{where}: null cannot be written in TOML (the declaration file would lose it)")
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, int):
        return str(item)
    if isinstance(item, float):
        if math.isnan(item):
            return "nan"
        if math.isinf(item):
            return "inf" if item > 0 else "-inf"
        return repr(item)
    if isinstance(item, str):
        return json.dumps(item, ensure_ascii=False)
    if isinstance(item, Mapping):
        if not item:
            return "{}"
        return "{ " + ", ".join(f"{key(str(k))} = {value(v, f'{where}.{k}')}" for k, v in item.items()) + " }"
    if isinstance(item, (list, tuple)):
        return "[" + ", ".join(value(v, f"{where}[{i}]") for i, v in enumerate(item)) + "]"
    raise ModelsInvalidError(f"{where}: a {type(item).__name__} cannot be written in TOML")


def document(data: Mapping[str, Any], header: str) -> str:
    """A new file: ``header`` as comments and a blank line, plain keys, ``indexes`` one per line, then the tables."""
    comments = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    return comments + "\n" + edit("", {}, data)


def edit(text: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """``text``, which declares ``before``, changed to declare ``after``; everything else stays byte for byte.

    ``before`` may differ from the text in spelling only (an index named by the reader, keys
    as a table): parts equal to ``after`` in that form are left as the text writes them.
    """
    try:
        doc = tomlkit.parse(text)
        _comments_to_headers(doc.body)
        closing = _closing_comments(doc.body) if doc.body and isinstance(doc.body[-1][1], Table) else []
        if closing:  # the file's closing comments are the file's, not its last table's
            doc.append(None, tomlkit.ws(_take(closing)))
        _patch(doc, before, after, "")
        out = doc.as_string()
    except TOMLKitError as exc:
        raise ModelsInvalidError(f"the declaration file cannot be updated in place ({type(exc).__name__}); nothing was written") from None
    out = _resolve_blank_lines(out)
    if "\r\n" in text and not _LONE_LF.search(text):  # a file with Windows line ends keeps them on the new lines too
        out = _LONE_LF.sub("\r\n", out)
    ending = re.search(r"(\r?\n)*\Z", text)
    if ending and ending.group():  # a table removed at the end leaves the blank line that stood before it
        out = out.rstrip("\r\n") + ending.group()
    return out


def _resolve_blank_lines(text: str) -> str:
    """Each run of line ends holding a mark: one blank line at least between two lines, none added at either end."""

    def blank(match: re.Match[str]) -> str:
        ends = match.group().count("\n")
        inside = match.start() > 0 and match.end() < len(text)
        return "\n" * (max(ends, 2) if inside else ends)

    return _BOUNDARIES.sub(blank, text)


def _is_table(item: Any) -> bool:
    """Whether the layout writes ``item`` as a table of its own (a non-empty mapping), not inline."""
    return isinstance(item, Mapping) and bool(item)


def _inline(item: Any, where: str) -> Item:
    """A value in the generated layout (a list of tables one per line), as an item ``tomlkit`` can place."""
    if isinstance(item, (list, tuple)) and item and all(isinstance(v, Mapping) for v in item):
        text = "[\n" + "".join(f"  {value(v, f'{where}[{i}]')},\n" for i, v in enumerate(item)) + "]"
    else:
        text = value(item, where)
    parsed = tomlkit.parse(f"v = {text}\n").item("v")
    assert isinstance(parsed, Item)  # one plain key: never a table split in parts
    return parsed


def _new(item: Any, where: str) -> Item:
    if not _is_table(item):
        return _inline(item, where)
    holds_values = any(not _is_table(v) for v in item.values())
    table = tomlkit.table(is_super_table=not holds_values)
    table.trivia.indent = _BOUNDARY
    parts = sorted(item.items(), key=lambda kv: _is_table(kv[1]))  # plain keys before tables, as TOML needs
    for name, part in parts:
        if holds_values and _is_table(part) and not isinstance(table.value.body[-1][1], Whitespace):
            table.append(None, tomlkit.ws(_BOUNDARY))  # the values end: a blank line before the next table
        table.append(name, _new(part, f"{where}.{name}"))
    if holds_values and not _is_table(parts[-1][1]):
        table.append(None, tomlkit.ws(_BOUNDARY))
    return table


def _patch(container: MutableMapping[str, Any], before: Mapping[str, Any], after: Mapping[str, Any], where: str) -> None:
    """Edit ``container`` (which holds ``before``) so that it holds ``after``, touching only what differs."""
    for name in [k for k in before if k not in after]:
        del container[name]
    for name, new in after.items():
        here = f"{where}.{name}" if where else name
        if name not in before:
            container[name] = _new(new, here)
            continue
        old = before[name]
        if canonical(old) == canonical(new):
            continue
        current = container[name]
        if isinstance(current, Table) and _is_table(new) and isinstance(old, Mapping):
            _patch(current, old, new, here)
        elif isinstance(current, Array) and isinstance(old, list) and isinstance(new, list) and _patch_list(current, old, new, here, here == "indexes"):
            pass
        elif isinstance(current, Table) or _is_table(new):  # a table becomes a value or the reverse: written anew
            del container[name]
            container[name] = _new(new, here)
        else:
            container[name] = _inline(new, here)  # in place: the comment after the value stays


Body = list[tuple[Any, Item]]


def _comments_to_headers(body: Body) -> None:
    """Give each table header the comment lines right above it (after a blank line), which ``tomlkit`` keeps
    at the end of the table before: so a removed table takes its own comments, and leaves the next one's;
    a new table goes after the previous table, not between a header and its comments. The text is unchanged."""
    for position, (_, item) in enumerate(body):
        if not isinstance(item, Table):
            continue
        header = item
        while header.is_super_table() and header.value.body and isinstance(header.value.body[0][1], Table):
            header = header.value.body[0][1]
        run = _closing_comments(body[:position])
        if run and not header.is_super_table():
            header.trivia.indent = _take(run) + header.trivia.indent
        _comments_to_headers(item.value.body)


def _take(comments: list[Comment]) -> str:
    """The text of ``comments``, which then write nothing where they stand."""
    text = "".join(comment.as_string() for comment in comments)
    for comment in comments:
        comment.trivia.indent = comment.trivia.comment_ws = comment.trivia.comment = comment.trivia.trail = ""
    return text


def _closing_comments(body: Body) -> list[Comment]:
    """The comment lines ending ``body`` (or its last table) that follow a blank line."""
    if not body:
        return []
    if isinstance(body[-1][1], Table):
        return _closing_comments(body[-1][1].value.body)
    start = len(body)
    while start and isinstance(body[start - 1][1], Comment):
        start -= 1
    if start in (0, len(body)) or not isinstance(body[start - 1][1], Whitespace):
        return []
    return [item for _, item in body[start:] if isinstance(item, Comment)]


def _patch_list(array: Array, old: list[Any], new: list[Any], where: str, by_name: bool) -> bool:
    """Remove, replace and insert entries one by one (an index known by its name, anything else by its value);
    False when the entries were reordered or repeat, and the list is better written whole."""
    if not old:
        return False  # an empty list gains the generated layout (one index a line)
    if by_name and not all(isinstance(x, Mapping) for x in [*old, *new]):
        return False
    ident = index_name if by_name else canonical
    old_ids, new_ids = [ident(x) for x in old], [ident(x) for x in new]
    if len(set(old_ids)) < len(old_ids) or len(set(new_ids)) < len(new_ids):
        return False
    staying = [i for i in old_ids if i in new_ids]
    if staying != [i for i in new_ids if i in old_ids]:
        return False
    for position in reversed(range(len(old))):
        if old_ids[position] not in new_ids:
            del array[position]
    wanted = dict(zip(new_ids, new, strict=True))
    was = dict(zip(old_ids, old, strict=True))
    for position, ident_ in enumerate(staying):
        if canonical(was[ident_]) != canonical(wanted[ident_]):
            array[position] = _inline(wanted[ident_], f"{where}[{position}]")
    position = 0
    for ident_ in new_ids:
        if ident_ not in was:
            array.insert(position, _inline(wanted[ident_], f"{where}[{position}]"))
        position += 1
    return True

