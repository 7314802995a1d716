"""``ctx.log``: a migration's (or a background transform's) own log lines, as events that carry where they came from.

``ctx.log.info("copied", count=n)`` emits a ``log`` event (run id, migration, direction,
attempt, level, message and a bounded copy of ``data``) whatever the log level, the moment
it is called: a body that fails or whose transaction is rolled back keeps the lines it
logged, and a retried transaction logs again with ``attempt`` 2. The same line also goes
to ``ctx.logger``, whose records carry those fields in ``extra``. The message and every text
of the data go through the shared redaction once, here, so that every place they reach (events,
``--json``, stderr, the stored run log) shows the same text without a password or secret URI
option. A line whose message or data cannot be shown (a ``__str__`` that raises) is dropped:
logging never fails the migration. The data is the author's: it may be a document value, so log
counts and names, not documents.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bson import Binary, Decimal128, Int64, ObjectId, Regex, Timestamp

from .events import Events
from .redaction import MASK, redact, secret_name

#: Bounds of a logged ``data``: nesting depth, items per list or mapping, characters per text.
MAX_DEPTH = 4
MAX_ITEMS = 50
MAX_TEXT = 1_000

#: Values kept as they are (BSON types stay typed; ``--json`` writes them as extended JSON).
_KEPT = (bool, int, float, type(None), datetime, ObjectId, Decimal128, Int64, Timestamp, Regex)

CorrelatedLogger = logging.LoggerAdapter[logging.Logger]


def correlated(logger: logging.Logger, run_id: str | None, name: str | None, direction: str | None, attempt: int) -> CorrelatedLogger:
    """``ctx.logger``: every record carries run id, migration, direction and attempt in ``extra``."""
    fields = {"run_id": run_id, "migration": name, "direction": direction, "attempt": attempt}
    return logging.LoggerAdapter(logger, fields, merge_extra=True)


def shown_text(value: str) -> str:
    """``value`` redacted, at most :data:`MAX_TEXT` characters: a longer one is cut and ends with
    ``… [cut: N characters]``, N its length as given (a lone "…" read like a line that ended so)."""
    text = redact(value[: MAX_TEXT * 8], None)  # bounds the work; what is shown is far shorter
    if len(text) <= MAX_TEXT and len(value) <= MAX_TEXT * 8:
        return text
    marker = f"… [cut: {len(value):,} characters]"
    return text[: MAX_TEXT - len(marker)] + marker


def bounded(value: Any, depth: int = 0) -> Any:
    """A copy of ``value`` small enough for an event: deep structures, long lists and texts are cut."""
    if isinstance(value, _KEPT):
        return value
    if isinstance(value, str):
        return shown_text(value)  # as the message: a URI's password never reaches an event or a line
    if isinstance(value, (bytes, Binary)):
        return Binary(bytes(value[:MAX_TEXT]))
    if depth >= MAX_DEPTH:
        return "…"
    if isinstance(value, Mapping):
        items = list(value.items())
        # a value under a secret's name is masked whole, as ``password=...`` is in a text: the line shows it as a pair
        copy = {str(k): MASK if secret_name(str(k)) else bounded(v, depth + 1) for k, v in items[:MAX_ITEMS]}
        if len(items) > MAX_ITEMS:
            copy["…"] = f"{len(items) - MAX_ITEMS} more"
        return copy
    if isinstance(value, (list, tuple, set, frozenset)):
        seq = list(value)
        copy_list = [bounded(v, depth + 1) for v in seq[:MAX_ITEMS]]
        if len(seq) > MAX_ITEMS:
            copy_list.append(f"… {len(seq) - MAX_ITEMS} more")
        return copy_list
    return bounded(str(value), depth)


@dataclass
class MigrationLog:
    """What ``ctx.log`` is: ``debug``/``info``/``warning``/``error(message, **data)``."""

    events: Events
    logger: CorrelatedLogger
    migration: str | None
    direction: str | None
    attempt: int

    def debug(self, message: str, **data: Any) -> None:
        self._log(logging.DEBUG, message, data)

    def info(self, message: str, **data: Any) -> None:
        self._log(logging.INFO, message, data)

    def warning(self, message: str, **data: Any) -> None:
        self._log(logging.WARNING, message, data)

    def error(self, message: str, **data: Any) -> None:
        self._log(logging.ERROR, message, data)

    def _log(self, level: int, message: str, data: dict[str, Any]) -> None:
        try:
            text = shown_text(str(message))
            copy = bounded(data)
        except Exception as exc:  # a value whose str() raises: the line is dropped, the caller's work goes on
            logging.getLogger("mongoshift").debug("a ctx.log line was dropped: its message or data cannot be shown (%s)", type(exc).__name__)
            return
        self.events.emit(
            "log",
            self.migration,
            level=logging.getLevelName(level).lower(),
            message=text,
            direction=self.direction,
            attempt=self.attempt,
            data=copy,
        )
        shown = "".join(f" {key}={value}" for key, value in copy.items())
        self.logger.log(level, "%s%s", text, shown, extra={"data": copy})
