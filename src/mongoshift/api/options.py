"""Options every API call shares: the application's client, observers (with OpenTelemetry), the lock and
confirmation values, the one-shot project of a flat call, and how log events print.

Checked when the call starts, so a wrong one fails at once with exit code 6 instead of in
a lane, or never.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from bson import json_util
from pymongo import AsyncMongoClient

from ..errors import ConfigInvalidError
from ..project.events import Event, Observer
from ..project.run import CancelSignal
from ..project.session import Project
from ..project.settings import Settings

#: Asked with the destructive actions of a converge (the converge plan's actions); True lets them run.
#: The same type as :data:`mongoshift.converge.applier.Confirm`, named here so that the API
#: does not load converge before a converge runs.
ConfirmCallback = Callable[[list[Any]], Awaitable[bool]]

#: One confirmation of a call's destructive steps: True (confirmed), False (refused unless
#: nothing destructive is planned), or a callback asked with the actions.
Confirmation = bool | ConfirmCallback


@dataclass(frozen=True)
class Lock:
    """How a writing call takes the migration lock (taken per call, released when it ends).

    ``take=False`` runs without it (local work only: another run could apply the same
    migrations at the same time); ``wait``: seconds to wait for another holder (None: refuse at once).
    """

    take: bool = True
    wait: float | None = None

    def check(self) -> Lock:
        if not isinstance(self.take, bool):
            raise ConfigInvalidError(f"Lock.take must be True or False, not {type(self.take).__name__}")
        if self.wait is not None and (
            isinstance(self.wait, bool) or not isinstance(self.wait, (int, float)) or not 0 <= self.wait < math.inf  # nan too
        ):
            raise ConfigInvalidError(f"Lock.wait must be a finite number of seconds (0 or more) or None, not {self.wait!r}")
        return self


#: The default of every writing call: take the lock, refused at once when another run holds it.
DEFAULT_LOCK = Lock()


def checked_flags(**flags: object) -> None:
    """Each named flag True or False (None where a call lets the settings decide, passed only then):
    ``step="no"`` or ``force=1`` would otherwise be taken for True by the truth of any value."""
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise ConfigInvalidError(f"{name} must be True or False, not {type(value).__name__}")


def checked_names(names: object, what: str = "names") -> list[str] | None:
    """A list of migration names (None: every one), checked before connecting: one name given as text would
    otherwise be read letter by letter (``"0002_x"`` as the names ``0``, ``0``, ...)."""
    if names is None:
        return None
    if isinstance(names, (str, bytes)) or not isinstance(names, (list, tuple)):
        raise ConfigInvalidError(f"{what} must be a list of migration names (or None for every one), not {type(names).__name__}")
    return list(names)


def checked_lock(lock: object) -> Lock:
    """``lock=``: a :class:`Lock`, checked before connecting."""
    if not isinstance(lock, Lock):
        raise ConfigInvalidError(f"lock must be a mongoshift Lock(take=..., wait=...), not {type(lock).__name__}")
    return lock.check()


def confirm_parts(confirm: object) -> tuple[bool, ConfirmCallback | None]:
    """``confirm=``, as converge takes it: (confirmed, callback)."""
    if isinstance(confirm, bool):
        return confirm, None
    if callable(confirm):
        ask = confirm

        async def asked(actions: list[Any]) -> bool:
            """A plain function is taken too: its answer, awaited only when it is awaitable, must be a bool."""
            answer = ask(actions)
            if inspect.isawaitable(answer):
                answer = await answer
            if not isinstance(answer, bool):
                raise ConfigInvalidError(f"confirm's function must answer True or False, not {type(answer).__name__}")
            return answer

        return False, asked
    raise ConfigInvalidError(f"confirm must be True, False or a function (async or plain) asked with the actions, not {type(confirm).__name__}")


def one_shot(
    settings: Settings, *, client: object = None, observers: object = (), cancel: CancelSignal | None = None
) -> Project:
    """The project of one flat call: opened by its run, closed when the run ends."""
    return Project(checked_settings(settings), checked_client(client), checked_observers(observers), checked_cancel(cancel))


def checked_settings(settings: object) -> Settings:
    """``settings``: what :func:`~mongoshift.api.load_settings` returns (a URI string is not settings)."""
    if not isinstance(settings, Settings):
        raise ConfigInvalidError(f"settings must be a mongoshift Settings (api.load_settings()), not {type(settings).__name__}")
    return settings


def checked_cancel(cancel: object) -> CancelSignal | None:
    """``cancel=``: a :class:`~mongoshift.CancelSignal`, or None for a signal of the call's own."""
    if cancel is not None and not isinstance(cancel, CancelSignal):
        raise ConfigInvalidError(f"cancel must be a mongoshift CancelSignal or None, not {type(cancel).__name__}")
    return cancel


def checked_client(client: object) -> AsyncMongoClient[Any] | None:
    """``client=``: an open :class:`~pymongo.AsyncMongoClient` of the application, used and left open."""
    if client is not None and not isinstance(client, AsyncMongoClient):
        raise ConfigInvalidError(f"client must be a pymongo AsyncMongoClient, not {type(client).__name__}")
    return client


def checked_observers(observers: object) -> list[Observer]:
    """``observers=``: plain functions (called, not awaited) that receive every event."""
    if isinstance(observers, (str, bytes)) or not isinstance(observers, Iterable):
        raise ConfigInvalidError(f"observers must be a list of functions, not {type(observers).__name__}")
    listed = list(observers)
    for observer in listed:
        checked_function("observers", observer)
    return listed


def run_observers(observers: object, settings: Settings) -> list[Observer]:
    """A writing call's ``observers=``, checked, with OpenTelemetry when its API is installed
    (:func:`mongoshift.telemetry.with_telemetry`: imported here, not by the read-only calls)."""
    from ..telemetry import with_telemetry

    return with_telemetry(checked_observers(observers), settings.db)


def checked_function(option: str, function: object) -> None:
    if not callable(function) or inspect.iscoroutinefunction(function):
        what = "an async function" if callable(function) else f"a {type(function).__name__}"
        raise ConfigInvalidError(f"{option}: a plain function is needed (called, not awaited), not {what}")


def log_entries(events: list[Event]) -> list[dict[str, Any]]:
    """``ctx.log`` events as JSON: BSON values of ``data`` as relaxed extended JSON (``{"$oid": ...}``)."""
    return [
        {
            "migration": e.migration,
            "direction": e.data.get("direction"),
            "attempt": e.data.get("attempt"),
            "level": e.data.get("level"),
            "message": e.data.get("message"),
            "data": to_json(e.data.get("data") or {}),
        }
        for e in events
    ]


def to_json(value: Any) -> Any:
    """``value`` as plain JSON types, BSON types kept as relaxed extended JSON."""
    return json.loads(json_util.dumps(value, json_options=json_util.RELAXED_JSON_OPTIONS))
