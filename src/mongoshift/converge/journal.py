"""The converge log (``converge_collection``, default ``_mongoshift_converge``).

One document per run that changed something or failed: who ran it, who asked
for it and why, where, when (server clock), whether it succeeded and every action with its outcome.
A run that found everything in place, a dry run and ``--check`` write nothing.
The document is written when applying starts and completed at the end, so a
run killed half-way is still visible (``success: null``).

Index documents and validators are stored as relaxed Extended JSON text in
``from`` / ``to``: a partial filter's ``$exists`` would otherwise become a
``$``-prefixed field name, which not every server version stores.
"""

from __future__ import annotations

import logging
from typing import Any

from pymongo import DESCENDING
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import PyMongoError

from ..project.redaction import describe_error
from ..project.run import RunInfo
from ..schema.index_specs import as_text
from .report import ConvergeReport

log = logging.getLogger("mongoshift.converge")


def _literal(value: Any) -> Any:
    return {"$literal": value}


def action_document(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "collection": row["collection"],
        "target": row["target"],
        "name": row["name"],
        "action": row["action"],
        "status": row["status"],
        "from": as_text(row["from"]),
        "to": as_text(row["to"]),
        "reason": row["reason"],
        "error": row.get("error"),
    }


class ConvergeJournal:
    def __init__(self, collection: AsyncCollection[dict[str, Any]], *, create_index: bool = True) -> None:
        self.collection = collection
        self._indexed = not create_index  # ensure_indexes = false: the log is read newest first, by a scan

    async def _ensure_index(self) -> None:
        if not self._indexed:
            await self.collection.create_index([("started_at", DESCENDING)], name="started_at")
            self._indexed = True

    def _identity(self, run: RunInfo, report: ConvergeReport) -> dict[str, Any]:
        return {
            "run_id": _literal(run.run_id),
            "trigger": _literal(report.trigger),
            "executed_by": _literal(run.executed_by),
            "requested_by": _literal(report.requested_by),
            "reason": _literal(report.reason),
            "host": _literal(run.host),
            "environment": _literal(run.environment),
        }

    async def start(self, run: RunInfo, report: ConvergeReport) -> str | None:
        """Mark the run as applying; a crash from here on leaves ``success: null`` behind.

        Returns a warning instead of raising: the log is a record of the run, and a log the
        user may not write to must not stop the indexes from being built."""
        fields = {**self._identity(run, report), "started_at": "$$NOW", "success": None}
        try:
            await self._ensure_index()
            await self.collection.update_one({"run_id": run.run_id}, [{"$set": fields}], upsert=True)
        except PyMongoError as exc:  # reported once, in the report's warnings (the CLI prints them)
            return f"could not write the converge log ({self.collection.name}): {describe_error(exc)}; applying anyway"
        return None

    async def finish(self, run: RunInfo, report: ConvergeReport) -> None:
        """Write the outcome; never raises (a failed log write must not hide the run's own result)."""
        body = report.to_json()
        fields = {
            **self._identity(run, report),
            "started_at": {"$ifNull": ["$started_at", "$$NOW"]},
            "finished_at": "$$NOW",
            "duration_ms": report.duration_ms,
            "success": report.success,
            "error": _literal(report.error),
            "changed": report.changed,
            "actions": _literal([action_document(row) for row in body["actions"] if row["action"] not in ("unchanged", "keep")]),
            "unstable": _literal(report.unstable),
        }
        try:
            await self._ensure_index()
            await self.collection.update_one({"run_id": run.run_id}, [{"$set": fields}], upsert=True)
        except PyMongoError as exc:
            log.warning("could not write the converge log (%s): %s", self.collection.name, describe_error(exc))

    async def history(self, limit: int = 20) -> list[dict[str, Any]]:
        return [doc async for doc in self.collection.find({}, {"_id": 0}).sort("started_at", DESCENDING).limit(limit)]
