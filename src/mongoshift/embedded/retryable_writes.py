"""Retryable writes: a write retried with the same ``(lsid, txnNumber)`` is applied once.

A driver retries a write (``insert``, ``update``, ``delete``, ``findAndModify`` sent with
``lsid`` and ``txnNumber``, outside a transaction) once after a network error or a
retryable error code, with the same session and transaction number. mongod records
the outcome of each statement in its transaction table and answers a retry from it
instead of writing again; mongoeco ignores ``txnNumber``, so a retried insert wrote
twice (or failed on its own duplicate key) and a retried ``$inc`` counted twice.

:class:`RetryableWrites` is that table: per session, the last transaction number and
the reply of the command that carried it, with the statements it covered. A retry
whose statements were all recorded gets the recorded reply (with mongod's
``retriedStmtIds``/``retriedStmtId``); a lower number than the session's last is
225 TransactionTooOld. Only the last number of each session is kept, as mongod keeps
only the last, and at most ``max_sessions`` sessions (the least recently used are
forgotten: a retry on one of those writes again, where mongod's table lives as long
as the session, 30 minutes).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections import OrderedDict
from typing import Any

DEFAULT_MAX_SESSIONS = 10_000
WRITE_COMMANDS = frozenset({"insert", "update", "delete", "findAndModify", "findandmodify"})
_BATCH_FIELDS = {"insert": "documents", "update": "updates", "delete": "deletes"}


class RetryError(Exception):
    """A retryable write mongod would refuse: ``code`` and ``code_name`` say why."""

    def __init__(self, message: str, code: int, code_name: str) -> None:
        super().__init__(message)
        self.code = code
        self.code_name = code_name


def _integer(value: object) -> int | None:
    value = getattr(value, "value", value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def is_retryable_write(command_name: str, body: dict[str, Any]) -> bool:
    """A write sent with a session and a transaction number, outside any transaction."""
    return (
        command_name in WRITE_COMMANDS
        and body.get("lsid") is not None
        and _integer(body.get("txnNumber")) is not None
        and "autocommit" not in body
    )


def statement_ids(command_name: str, command: dict[str, Any]) -> tuple[int, ...]:
    """The statements a write command carries: its ``stmtIds``, else ``stmtId`` (0) onwards."""
    field = _BATCH_FIELDS.get(command_name)
    count = len(command.get(field) or []) if field is not None else 1
    listed = command.get("stmtIds")
    if isinstance(listed, list) and all(_integer(item) is not None for item in listed):
        return tuple(_integer(item) or 0 for item in listed)
    first = _integer(command.get("stmtId")) or 0
    return tuple(range(first, first + count))


def _kind(command_name: str) -> str:
    return "findAndModify" if command_name == "findandmodify" else command_name


@dataclasses.dataclass
class SessionWrites:
    """One session's last retryable write: its number, the statements it covered, its reply."""

    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)
    txn_number: int = -1
    command: str = ""
    statements: frozenset[int] = frozenset()
    reply: dict[str, Any] | None = None

    def check(self, txn_number: int, statements: tuple[int, ...], command_name: str) -> dict[str, Any] | None:
        """The reply a retry gets from the record, or None to run the command (raises what mongod refuses)."""
        if txn_number < self.txn_number:
            raise RetryError(
                f"Cannot start transaction {txn_number} on session because a newer transaction "
                f"{self.txn_number} has already started",
                225,
                "TransactionTooOld",
            )
        if txn_number > self.txn_number or self.reply is None:
            return None
        if _kind(command_name) != _kind(self.command):
            if "findAndModify" in (_kind(command_name), _kind(self.command)):
                raise RetryError(
                    "findAndModify retry request is not compatible with the previous write in the transaction",
                    40606,
                    "Location40606",
                )
            raise RetryError(
                "Incomplete history detected for transaction: its retry is another command", 217, "IncompleteTransactionHistory"
            )
        wanted = frozenset(statements)
        if wanted <= self.statements:
            reply = copy.deepcopy(self.reply)
            if command_name in _BATCH_FIELDS:
                reply["retriedStmtIds"] = list(statements)
            else:
                reply["retriedStmtId"] = statements[0] if statements else 0
            return reply
        if wanted & self.statements:
            raise RetryError(
                "Incomplete history detected for transaction: a retry names statements the first attempt did not",
                217,
                "IncompleteTransactionHistory",
            )
        return None

    def record(self, txn_number: int, statements: tuple[int, ...], command_name: str, reply: dict[str, Any]) -> None:
        if txn_number != self.txn_number:
            self.statements = frozenset()
        self.txn_number = txn_number
        self.command = command_name
        self.statements = self.statements | frozenset(statements)
        self.reply = copy.deepcopy(reply)


class RetryableWrites:
    """The server's transaction table for retryable writes, bounded to ``max_sessions`` sessions."""

    def __init__(self, max_sessions: int = DEFAULT_MAX_SESSIONS) -> None:
        if max_sessions < 1:
            raise ValueError("the retryable-write table needs room for at least one session")
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, SessionWrites] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def session(self, key: str) -> SessionWrites:
        entry = self._sessions.get(key)
        if entry is None:
            entry = self._sessions[key] = SessionWrites()
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        else:
            self._sessions.move_to_end(key)
        return entry
