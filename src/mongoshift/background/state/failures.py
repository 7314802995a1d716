"""Why documents failed, as ``background status`` shows it: counted per reason, never with an id.

The engine stores each failed document's reason already masked (a duplicate key without its
values, a validator refusal or a server error by its code). What a transform raised is kept as
``Class: message``, the message being the migration author's own words. Shown here are the
reason, the error class or server code, and the start of that text; the documents' ids stay in
the engine's records, where the next passes need them, and are never printed.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from ...project.wording import plural

#: How many of the most recent reasons ``status`` shows, and how much of each message.
RECENT_SHOWN = 20
MESSAGE_CHARS = 200

_CLASS = re.compile(r"^([A-Za-z_]\w*): ")
_CODE = re.compile(r"(?:\((?:[^()]*, )?(-?\d+)\)|^write error (-?\d+))$")


def over_budget(name: str, count: int, limit: int) -> str:
    """Why a migration failed on too many failed documents, and the way out: a plain ``retry``
    leaves those documents out, so it would fail again on the same count."""
    return (
        f"{plural(count, 'document')} could not be migrated, more than max_document_errors ({limit}), when it stopped "
        f"(lanes that were writing may have failed more: 'mongoshift background status {name}' counts them all); once the transform is fixed and pinned, "
        f"'mongoshift background retry {name} --from-start' tries them again"
    )


def signature(entry: Mapping[str, Any]) -> tuple[str, str | None, int | None]:
    """(reason, error class, server code) of one stored reason."""
    reason = str(entry.get("reason") or "unknown")
    if "error_class" in entry or "code" in entry:  # stored apart already
        code = entry.get("code")
        return reason, entry.get("error_class"), int(code) if isinstance(code, int) else None
    text = str(entry.get("error") or "")
    found = _CLASS.match(text) if reason == "transform" else None
    match = _CODE.search(text)
    number = next((g for g in match.groups() if g is not None), None) if match else None
    return reason, found.group(1) if found else None, int(number) if number is not None else None


def count_key(entry: Mapping[str, Any]) -> str:
    """A field name for the per-reason counter: ``reason:Class`` or ``reason:code`` (no dot, no ``$``)."""
    reason, cls, code = signature(entry)
    detail = cls if cls is not None else (str(code) if code is not None else "-")
    return re.sub(r"[.$]", "_", f"{reason}:{detail}")


def _parse_key(key: str) -> dict[str, Any]:
    reason, _, detail = key.partition(":")
    code = int(detail) if re.fullmatch(r"-?\d+", detail) else None
    return {"reason": reason, "error_class": None if code is not None or detail in ("", "-") else detail, "code": code}


def shown(entry: Mapping[str, Any]) -> dict[str, Any]:
    """One stored reason as shown: class, code and the first ``MESSAGE_CHARS`` characters."""
    reason, cls, code = signature(entry)
    text = str(entry.get("error") or "")
    if cls is not None and text.startswith(f"{cls}: "):
        text = text[len(cls) + 2 :]
    if len(text) > MESSAGE_CHARS:
        text = text[: MESSAGE_CHARS - 1] + "…"
    at = entry.get("at")
    return {"reason": reason, "error_class": cls, "code": code, "error": text, "at": at if isinstance(at, datetime) else None}


def recent(entries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The ``RECENT_SHOWN`` most recent reasons as shown (:func:`shown`), identical ones once (at their latest, with
    ``times``: how many of the kept reasons they are), oldest first: twenty documents failing the same way are one
    line, not twenty."""
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for entry in entries:
        one = shown(entry)
        key = (one["reason"], one["error_class"], one["code"], one["error"])
        before = latest.pop(key, None)  # moved to the end: its latest time decides its place
        latest[key] = {**one, "times": (before["times"] if before else 0) + 1}
    return list(latest.values())[-RECENT_SHOWN:]


def counted(counts: Mapping[str, int], entries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Counts per reason, largest first; records written before counting existed count their kept reasons."""
    if not counts:
        counts = Counter(count_key(e) for e in entries)
    rows = [{**_parse_key(key), "count": int(n)} for key, n in counts.items() if n]
    return sorted(rows, key=lambda r: (-r["count"], r["reason"], str(r["error_class"] or r["code"] or "")))
