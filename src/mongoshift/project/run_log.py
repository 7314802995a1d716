"""The run log: each run's ``ctx.log`` lines, kept in the project's database per run id.

A ``ctx.log`` line is an event of the process that ran the migration (:mod:`.migration_log`);
stored here (``run_log_collection``), a dashboard or a colleague in another process can read
it later. What is kept is the line's place (run id, ``seq``, migration, direction, attempt),
its level, its time and its message through the shared redaction, never its ``data`` (the
author's, which may be a document value). Bounded: at most :data:`MAX_LINES` lines per run
(then one line saying how many more were not kept), and with ``ensure_indexes`` a TTL index
expires lines :data:`RUN_LOG_DAYS` days after they were logged.

The run writes its lines in batches (every :data:`BATCH` lines, at the end of each
migration, at the end of the run), off the migration's transaction, so lines of a body that
failed or rolled back are kept. A failed write never fails the run: the run ends with a
warning that says how many lines were lost.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pymongo import ASCENDING
from pymongo.asynchronous.collection import AsyncCollection

from .events import Event
from .migration_log import MAX_TEXT
from .redaction import describe_error, redact
from .wording import plural

log = logging.getLogger("mongoshift")

#: Lines kept per run; a run that logs more keeps its first ones and a line counting the rest.
MAX_LINES = 10_000
#: Lines per write.
BATCH = 200
#: Days a line is kept (the TTL index on ``at``).
RUN_LOG_DAYS = 30
LEVELS = ("debug", "info", "warning", "error")


@dataclass(frozen=True)
class RunLogLine:
    """One stored ``ctx.log`` line of a run, in the run's order (``seq`` from 1)."""

    run_id: str
    seq: int
    migration: str | None
    direction: str | None
    attempt: int | None
    level: str
    message: str
    at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "seq": self.seq, "migration": self.migration, "direction": self.direction,
            "attempt": self.attempt, "level": self.level, "message": self.message, "at": self.at.isoformat(),
        }


class RunLogWriter:
    """An observer of one run's events that stores its ``log`` events in batches (see the module's docstring).

    Thread-safe: a plain ``def`` migration logs from its worker thread; the writes are made on
    the run's event loop.
    """

    def __init__(self, collection: AsyncCollection[dict[str, Any]], run_id: str, *, create_indexes: bool = True) -> None:
        self.collection = collection
        self.run_id = run_id
        self._loop = asyncio.get_running_loop()
        self._mutex = threading.Lock()
        self._pending: list[dict[str, Any]] = []
        self._seq = 0
        self._dropped = 0
        self._lost = 0
        self._error: str | None = None
        self._indexed = not create_indexes
        self._writing = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    def __call__(self, event: Event) -> None:
        """The observer: keep a ``log`` line; write when a batch is full or a migration ended."""
        if event.kind == "migration_end":
            self._wake()
            return
        if event.kind != "log":
            return
        with self._mutex:
            if self._seq >= MAX_LINES:
                self._dropped += 1
                return
            self._seq += 1
            self._pending.append(self._document(self._seq, event.migration, event.data))
            full = len(self._pending) >= BATCH
        if full:
            self._wake()

    def _document(self, seq: int, migration: str | None, data: dict[str, Any]) -> dict[str, Any]:
        level = data.get("level")
        attempt = data.get("attempt")
        return {
            "run_id": self.run_id,
            "seq": seq,
            "migration": migration,
            "direction": data.get("direction"),
            "attempt": attempt if isinstance(attempt, int) else None,
            "level": level if level in LEVELS else "info",
            "message": redact(str(data.get("message", "")), limit=MAX_TEXT),
            "at": datetime.now(UTC),
        }

    def _wake(self) -> None:
        """Schedule a write on the run's loop (from any thread)."""
        with self._mutex:
            if not self._pending:
                return
        self._loop.call_soon_threadsafe(self._start_flush)

    def _start_flush(self) -> None:
        task = self._loop.create_task(self.flush())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def flush(self) -> None:
        """Write the lines kept so far; a failure is remembered for :meth:`close`, never raised."""
        async with self._writing:
            with self._mutex:
                batch, self._pending = self._pending, []
            if not batch:
                return
            try:
                if not self._indexed:
                    await self.collection.create_index([("run_id", ASCENDING), ("seq", ASCENDING)], name="run_id_seq", unique=True)
                    await self.collection.create_index("at", name="at_ttl", expireAfterSeconds=RUN_LOG_DAYS * 86_400)
                    self._indexed = True
                await self.collection.insert_many(batch, ordered=False)
            except Exception as exc:  # whatever stops the write is the run's warning, never its failure
                self._lost += len(batch)
                self._error = self._error or describe_error(exc)
                log.debug("storing %d run log lines failed: %s", len(batch), self._error)

    async def close(self) -> str | None:
        """Write what is left (and the count of lines not kept); the run's warning when lines were lost, else None."""
        if self._tasks:
            await asyncio.gather(*self._tasks)
        with self._mutex:
            if self._dropped:
                note = {"kind": "log", "level": "warning", "message": f"{self._dropped} more log lines of this run were not kept "
                        f"(at most {MAX_LINES} per run)"}
                self._pending.append(self._document(MAX_LINES + 1, None, note))
                self._dropped = 0
        await self.flush()
        if not self._lost:
            return None
        return f"{plural(self._lost, 'ctx.log line')} of this run could not be stored in {self.collection.name}: {self._error}"


async def read_run_log(collection: AsyncCollection[dict[str, Any]], run_id: str) -> list[RunLogLine]:
    """The stored lines of ``run_id`` in order (empty: no line stored, or the run's lines expired)."""
    cursor = collection.find({"run_id": run_id}, {"_id": 0}).sort("seq", ASCENDING).limit(MAX_LINES + 1)
    return [
        RunLogLine(
            doc["run_id"], int(doc["seq"]), doc.get("migration"), doc.get("direction"), doc.get("attempt"),
            str(doc.get("level", "info")), str(doc.get("message", "")), _utc(doc["at"]),
        )
        async for doc in cursor
    ]


def _utc(at: datetime) -> datetime:
    """A stored time as UTC (an application's client may read naive datetimes)."""
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
