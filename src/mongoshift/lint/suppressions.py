"""Per-file suppressions: ``# mongoshift-lint: allow MS101 -- why this file may do it``.

One comment anywhere in the file accepts every finding of the named rules in that file
(ids or names, comma-separated). The reason after ``--`` is required: a suppression is a
decision a reviewer reads, so one without a reason, or naming no rule, is itself a finding
(MS100) that no comment can silence.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass

from .rules import BY_NAME, RULES

MARKER = re.compile(r"#\s*mongoshift-lint\s*:\s*allow\b(?P<rest>.*)$")
#: A reason says something: at least this many characters once trimmed.
MIN_REASON = 8


@dataclass(frozen=True)
class Suppression:
    rules: tuple[str, ...]
    reason: str
    line: int


@dataclass(frozen=True)
class BadSuppression:
    line: int
    problem: str


def read_suppressions(source: str) -> tuple[list[Suppression], list[BadSuppression]]:
    """The file's suppression comments, and the malformed ones (each an MS100 finding)."""
    good: list[Suppression] = []
    bad: list[BadSuppression] = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return good, bad
    for token in tokens:
        if token.type != tokenize.COMMENT:
            continue
        found = MARKER.match(token.string)
        if found is None:
            continue
        line = token.start[0]
        names, _, reason = found.group("rest").partition("--")
        wanted = [n.strip() for n in names.split(",") if n.strip()]
        ids = [BY_NAME.get(n, n.upper()) for n in wanted]
        unknown = [n for n, i in zip(wanted, ids, strict=True) if i not in RULES or i == "MS100"]
        if "MS100" in ids:  # a known rule, but the one that keeps suppressions honest: "names MS100: name rules by id" misled
            bad.append(BadSuppression(line, "the suppression names MS100, which cannot be suppressed: fix the comments it reports instead"))
            continue
        if not wanted or unknown:
            shown = ", ".join(unknown) if unknown else "no rule"
            bad.append(BadSuppression(line, f"the suppression names {shown}: name rules by id or name ({', '.join(r for r in RULES if r != 'MS100')})"))
            continue
        if len(reason.strip()) < MIN_REASON:
            said = "gives no reason" if not reason.strip() else f"gives too short a reason (at least {MIN_REASON} characters)"
            bad.append(BadSuppression(line, f"the suppression {said}: write it after '--' (why this file may do it)"))
            continue
        good.append(Suppression(tuple(ids), reason.strip(), line))
    return good, bad
