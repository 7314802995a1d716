"""Fail points as mongod implements them for tests (``configureFailPoint``, test commands enabled).

mongoeco 4.11 has one ``failCommand`` of its own, consumed deep inside its database
command service: never on commit/abort, change-stream ``aggregate``/``getMore`` or
``hello``; ``closeConnection`` answered with an error instead of dropping the socket;
an injected ``writeConcernError`` replacing the write instead of following it. This
module is the server's one implementation, evaluated around each command
(:mod:`mongoshift.embedded.patches.replica_set`), with mongod's semantics
(``src/mongo/db/commands.cpp``, ``service_entry_point_common.cpp``):

* ``failCommand``: ``data.failCommands`` (or ``failAllCommands``), ``appName``,
  ``namespace``; when it activates before the command runs: ``blockConnection`` +
  ``blockTimeMS`` delay that connection only, ``closeConnection`` drops it without a
  reply (:class:`CloseConnection`), ``errorCode`` (+ ``errorExtraInfo``) fails the
  command; ``errorLabels`` replace the labels the server would add. A
  ``writeConcernError`` is a second activation, after the command succeeded: the write
  is kept and the reply carries the error. ``configureFailPoint`` itself never fires.
* ``onPrimaryTransactionalWrite``: a retryable write applied, then its connection
  dropped (``closeConnection``, default true), or failed before it applies
  (``failBeforeCommitExceptionCode``).
* ``failGetMoreAfterCursorCheckout``: a ``getMore`` fails with ``errorCode``.

Modes: ``off``, ``alwaysOn``, ``{times: n}``, ``{skip: n}``, ``{activationProbability: p}``;
``times`` and ``skip`` count only the commands the fail point's data selects.
"""

from __future__ import annotations

import dataclasses
import random
import threading
from collections.abc import Callable
from typing import Any

FAIL_COMMAND = "failCommand"
ON_PRIMARY_TRANSACTIONAL_WRITE = "onPrimaryTransactionalWrite"
FAIL_GET_MORE_AFTER_CURSOR_CHECKOUT = "failGetMoreAfterCursorCheckout"
SUPPORTED = (FAIL_COMMAND, ON_PRIMARY_TRANSACTIONAL_WRITE, FAIL_GET_MORE_AFTER_CURSOR_CHECKOUT)

#: mongod's message for a command failed by ``failCommand``.
FAIL_COMMAND_MESSAGE = "Failing command via 'failCommand' failpoint"

# Command names mongod treats as one command (Command::hasAlias).
_ALIASES = {
    "ismaster": "hello",
    "isMaster": "hello",
    "findandmodify": "findAndModify",
    "buildinfo": "buildInfo",
}


def canonical_command(name: str) -> str:
    return _ALIASES.get(name, name)


class CloseConnection(ConnectionError):
    """Raised by a command to make the server drop its connection without replying.

    The connection handler catches it (as any ``ConnectionError``) and closes the socket,
    which the driver sees as a network error, as after mongod's ``closeConnection``."""


class FailPointError(ValueError):
    """A ``configureFailPoint`` command mongod would refuse (unknown name, bad mode)."""


@dataclasses.dataclass(slots=True)
class _FailPoint:
    name: str
    mode: str = "off"  # off | alwaysOn | times | skip | probability
    remaining: int = 0  # times: activations left; skip: selections still skipped
    probability: float = 0.0
    data: dict[str, Any] = dataclasses.field(default_factory=dict)
    entered: int = 0  # activations since the process started (configureFailPoint's "count")


@dataclasses.dataclass(frozen=True, slots=True)
class CommandView:
    """What a fail point's data can select a command by."""

    name: str
    namespace: str
    app_name: str | None


def _selects(data: dict[str, Any], command: CommandView) -> bool:
    """mongod's CommandHelpers::shouldActivateFailCommandFailPoint (no internal clients here)."""
    if command.name == "configureFailPoint":
        return False  # banned even if listed
    if "appName" in data and data["appName"] != command.app_name:
        return False
    if "namespace" in data and data["namespace"] != command.namespace:
        return False
    if "failAllCommands" in data:
        return True
    names = data.get("failCommands")
    if not isinstance(names, list):
        return False
    wanted = canonical_command(command.name)
    return any(isinstance(name, str) and canonical_command(name) == wanted for name in names)


def _flag(data: dict[str, Any], key: str) -> bool:
    return data.get(key) is True


def _integer(value: object) -> int | None:
    value = getattr(value, "value", value)  # mongoeco's BsonInt64
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class Injection:
    """What an activated ``failCommand`` does to one command, before it runs."""

    block_ms: int
    close_connection: bool
    error_code: int | None
    error_extra: dict[str, Any] | None
    error_labels: list[str] | None  # None: the server's own labels apply


class FailPoints:
    """The server's fail points (one set per server, shared by every connection)."""

    def __init__(self, *, chance: Callable[[], float] = random.random) -> None:
        self._lock = threading.Lock()
        self._points = {name: _FailPoint(name) for name in SUPPORTED}
        self._chance = chance

    def configure(self, command: dict[str, Any]) -> dict[str, Any]:
        """``configureFailPoint``: mongod's reply is the count of activations before this call."""
        name = command.get("configureFailPoint")
        if name not in self._points:
            raise FailPointError(f"fail point {name!r} is not supported by the embedded server (it has {', '.join(SUPPORTED)})")
        mode, remaining, probability = self._parse_mode(command.get("mode"))
        data = command.get("data", {})
        if not isinstance(data, dict):
            raise FailPointError("the fail point's data must be an object")
        with self._lock:
            point = self._points[str(name)]
            count = point.entered
            point.mode, point.remaining, point.probability = mode, remaining, probability
            point.data = dict(data) if mode != "off" else {}
        return {"count": count, "ok": 1.0}

    @staticmethod
    def _parse_mode(mode: object) -> tuple[str, int, float]:
        if mode in ("off", "alwaysOn"):
            return str(mode), 0, 0.0
        if isinstance(mode, dict) and len(mode) == 1:
            key, value = next(iter(mode.items()))
            if key in ("times", "skip"):
                number = _integer(value)
                if number is None or number < 0:
                    raise FailPointError(f"'{key}' must be a non-negative integer")
                if key == "times":
                    return ("times", number, 0.0) if number > 0 else ("off", 0, 0.0)
                return "skip", number, 0.0
            if key == "activationProbability" and isinstance(value, int | float) and 0 <= value <= 1:
                return "probability", 0, float(value)
        raise FailPointError("the fail point's mode must be 'off', 'alwaysOn', {times: n}, {skip: n} or {activationProbability: p}")

    def _activate(self, name: str, selects: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
        """The data of fail point ``name`` if it activates now (mongod's FailPoint::shouldFail)."""
        with self._lock:
            point = self._points[name]
            if point.mode == "off" or not selects(point.data):
                return None
            if point.mode == "skip":
                if point.remaining > 0:
                    point.remaining -= 1
                    return None
            elif point.mode == "probability":
                if self._chance() >= point.probability:
                    return None
            elif point.mode == "times":
                point.remaining -= 1
                if point.remaining <= 0:
                    point.mode = "off"
            point.entered += 1
            return point.data

    def before_command(self, command: CommandView) -> Injection | None:
        """``failCommand`` as mongod evaluates it before running a command."""
        data = self._activate(
            FAIL_COMMAND,
            lambda data: _selects(data, command)
            and (_flag(data, "closeConnection") or _flag(data, "blockConnection") or _integer(data.get("errorCode")) is not None),
        )
        if data is None:
            return None
        labels = data.get("errorLabels")
        extra = data.get("errorExtraInfo")
        return Injection(
            block_ms=max(0, _integer(data.get("blockTimeMS")) or 0) if _flag(data, "blockConnection") else 0,
            close_connection=_flag(data, "closeConnection"),
            error_code=_integer(data.get("errorCode")),
            error_extra=dict(extra) if isinstance(extra, dict) else None,
            error_labels=[str(label) for label in labels] if isinstance(labels, list) else None,
        )

    def write_concern_error(self, command: CommandView) -> tuple[dict[str, Any], list[str] | None] | None:
        """``failCommand``'s second activation, after a command succeeded: (error, labels)."""
        data = self._activate(
            FAIL_COMMAND, lambda data: _selects(data, command) and isinstance(data.get("writeConcernError"), dict)
        )
        if data is None:
            return None
        labels = data.get("errorLabels")
        return dict(data["writeConcernError"]), ([str(label) for label in labels] if isinstance(labels, list) else None)

    def transactional_write(self) -> tuple[bool, int | None] | None:
        """``onPrimaryTransactionalWrite`` for one retryable write: (close the connection, code to fail with)."""
        data = self._activate(ON_PRIMARY_TRANSACTIONAL_WRITE, lambda data: True)
        if data is None:
            return None
        return data.get("closeConnection", True) is not False, _integer(data.get("failBeforeCommitExceptionCode"))

    def get_more(self) -> int | None:
        """``failGetMoreAfterCursorCheckout``: the code a ``getMore`` fails with."""
        data = self._activate(
            FAIL_GET_MORE_AFTER_CURSOR_CHECKOUT, lambda data: _integer(data.get("errorCode")) is not None
        )
        return None if data is None else _integer(data.get("errorCode"))
