"""``--log-format json``: every stderr line one JSON object, for log collectors.

A line has ``time`` (UTC, ISO 8601), ``level``, ``logger`` and ``message``, and when the
record carries them ``run_id``, ``tenant`` (a command across tenants), ``migration``, ``direction``, ``attempt`` (``ctx.logger``
and ``ctx.log`` lines), ``event`` (an event's kind, with ``-v``) and ``data`` (BSON values as
relaxed extended JSON). Warnings and the final error are lines too. A traceback is
redacted as in text mode.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from ..project.redaction import mask_credentials, redact

#: Record attributes copied into the line when present.
CORRELATION = ("run_id", "tenant", "migration", "direction", "attempt", "event")


def json_line(level: str, message: str, *, logger: str = "mongoshift", created: float | None = None, **fields: Any) -> str:
    """One stderr line as JSON; ``data`` keeps BSON types as extended JSON."""
    when = datetime.fromtimestamp(created, UTC) if created is not None else datetime.now(UTC)
    line: dict[str, Any] = {"time": when.isoformat(timespec="milliseconds"), "level": level.lower(), "logger": logger, "message": message}
    for key, value in fields.items():
        if value is not None:
            line[key] = value
    if "data" in line:
        from bson import json_util  # start-up time: only JSON log lines with data need it

        return json_util.dumps(line, json_options=json_util.RELAXED_JSON_OPTIONS)
    return json.dumps(line, default=str)


class JsonLineFormatter(logging.Formatter):
    """A log record as one JSON line (:func:`json_line`)."""

    def format(self, record: logging.LogRecord) -> str:
        fields = {key: getattr(record, key, None) for key in (*CORRELATION, "data")}
        if record.exc_info:
            fields["traceback"] = redact(self.formatException(record.exc_info), limit=20_000)
        message = mask_credentials(record.getMessage())  # a migration's own ctx.logger line too (see SafeFormatter)
        return json_line(record.levelname, message, logger=record.name, created=record.created, **fields)
