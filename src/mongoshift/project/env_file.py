"""A ``.env`` file: a small, strict parser, so a typo fails loudly instead of changing a setting.

Accepted, one assignment a line:

- ``NAME=value``, ``export NAME=value``; spaces around ``=`` are allowed; ``NAME`` is
  letters, digits and ``_``, not starting with a digit;
- an unquoted value runs to the end of the line, trimmed; `` #`` (a space, then ``#``)
  starts a comment;
- ``'single quoted'`` is taken as written; ``"double quoted"`` knows the escapes
  ``\\n \\t \\" \\\\``; after the closing quote only a comment may follow;
- blank lines and lines starting with ``#`` are skipped.

Refused (exit 6, naming the file and the line, never the value): anything else, a name
given twice, a quote that does not close on its line, a NUL character in a value, a file over 1 MB or that is not a
regular file. No ``${VAR}`` expansion, no multi-line values: ``$`` is an ordinary character.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from ..errors import ConfigInvalidError, IOFailedError

MAX_BYTES = 1_000_000

_LINE = re.compile(r"^\s*(?:export\s+)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*(?P<rest>.*?)\s*$")
_DOUBLE_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}


def read_env_file(path: Path, also: Callable[[dict[str, str]], list[str]] | None = None) -> dict[str, str]:
    """The assignments of ``path``, in file order. ``also``: the caller's problems with the lines that
    parsed (a name that is no setting), listed with the refused lines when there are any."""
    try:
        if not path.exists():
            raise FileNotFoundError(path)
        if not path.is_file():
            raise ConfigInvalidError(f"env file {path} is not a regular file", file=str(path))
        if path.stat().st_size > MAX_BYTES:
            raise ConfigInvalidError(f"env file {path} is larger than 1 MB: not a .env file", file=str(path))
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigInvalidError(f"env file not found: {path}", file=str(path)) from None
    except UnicodeDecodeError:
        raise ConfigInvalidError(f"env file {path} is not UTF-8 text", file=str(path)) from None
    except OSError as exc:
        raise IOFailedError.from_os(exc, "read the env file", path) from None
    values: dict[str, str] = {}
    lines: dict[str, int] = {}
    problems: list[tuple[int, str]] = []  # every refused line at once, so that one edit fixes them all
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            problems.append((number, f"line {number}: expected NAME=value"))
            continue
        name = match["name"]
        if name in lines:
            problems.append((number, f"line {number}: {name} is already set on line {lines[name]}"))
            continue
        lines[name] = number
        try:
            values[name] = _value(match["rest"])
            if "\x00" in values[name]:
                raise ValueError("a NUL character, which no environment variable can hold")
        except ValueError as exc:
            problems.append((number, f"line {number} ({name}): {exc}"))
    if problems:
        more = also(values) if also is not None else []
        raise ConfigInvalidError(
            f"env file {path}, {'; '.join([*(text for _, text in problems), *more])}",
            file=str(path), line=problems[0][0], lines=[number for number, _ in problems],
        )
    return values


def _value(raw: str) -> str:
    """One value as written after ``=``; the error never quotes it (it may be a password)."""
    if not raw:
        return ""
    quote = raw[0]
    if quote not in "'\"":
        return re.split(r"\s#", raw, maxsplit=1)[0].rstrip()
    out: list[str] = []
    index = 1
    while index < len(raw):
        char = raw[index]
        if char == quote:
            tail = raw[index + 1 :].strip()
            if tail and not tail.startswith("#"):
                raise ValueError("only a comment may follow the closing quote")
            return "".join(out)
        if quote == '"' and char == "\\" and index + 1 < len(raw):
            escaped = raw[index + 1]
            if escaped not in _DOUBLE_ESCAPES:
                raise ValueError(f"unknown escape \\{escaped} (known: \\n \\t \\\" \\\\)")
            out.append(_DOUBLE_ESCAPES[escaped])
            index += 2
            continue
        out.append(char)
        index += 1
    raise ValueError("the quote does not close on this line (values are one line)")
