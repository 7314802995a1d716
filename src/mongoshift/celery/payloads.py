"""The task payloads: versioned and validated, so a worker never runs what it misreads.

A payload names a migration and the bookkeeping of its run (group, batch, deadline); nothing
else crosses the broker. ``v`` is the payload's version: a worker runs the versions it
knows (:data:`VERSIONS`) and refuses the rest, unknown fields included, with
:class:`~mongoshift.errors.TaskInvalidError` (exit 25), never retried. The message names the
field and the problem, never a value.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from ..errors import TaskInvalidError

#: The payload versions this release reads (2: an ``up`` task's ``direction``, ``checksum`` and ``ordered``).
VERSIONS = (1, 2)

_NAME = r"^[^/\\\x00]{1,255}$"


class Payload(BaseModel):
    """A task's payload; each kind declares the versions ``v`` it has."""

    # Strict: a value of another type is refused, never converted ("3" is no batch, 0 no ``ordered``).
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class UpPayload(Payload):
    """One migration of a line: ``up NAME`` in ``batch`` (or ``down NAME``, ``redo NAME``), part of ``group``.

    Version 2 carries the file's ``checksum`` when it was queued (a file changed since is
    refused, not run), the ``direction`` and ``ordered``; version 1 (an ``up`` of the line,
    ordered, no checksum) is still read, for the messages queued before an upgrade."""

    v: Literal[1, 2] = 2
    name: str = Field(pattern=_NAME)
    group: str = Field(min_length=1, max_length=64)
    #: The batch an ``up`` records (``down`` and ``redo``: the batch the migration was in, informative).
    batch: int = Field(ge=1)
    #: Unix time after which a task still waiting (for the ones ahead of it, or for the lock) gives up.
    wait_until: float = Field(gt=0, allow_inf_nan=False)
    direction: Literal["up", "down", "redo"] = "up"
    #: The file's checksum when the task was queued.
    checksum: str | None = Field(default=None, pattern=r"^[0-9a-f]{16,128}$")
    #: True for a line (``up``/``down NAME --ordered``); False for one file queued on its own.
    ordered: bool = True

    @property
    def kinds(self) -> tuple[str, ...]:
        """What a worker must allow to run it (``register(app, allow=...)``): its direction, and ``unordered``
        for one file run on its own, outside the line's order (a redo always takes one file: ``redo`` says it)."""
        return (self.direction,) if self.ordered or self.direction == "redo" else (self.direction, "unordered")

    @model_validator(mode="after")
    def _fields_of_its_version(self) -> UpPayload:
        if self.v == 1 and (self.direction != "up" or self.checksum is not None or not self.ordered):
            raise PydanticCustomError("version_1_has_no_such_field", "direction, checksum and ordered came with version 2")
        if self.v == 2 and self.checksum is None:
            raise PydanticCustomError("checksum_missing", "a version 2 payload carries the file's checksum")
        return self


class CoordinatorPayload(Payload):
    """One step of a background migration's coordinator; ``chain`` owns its ``background:<name>`` intent."""

    v: Literal[1] = 1
    name: str = Field(pattern=_NAME)
    chain: str = Field(min_length=1, max_length=64)
    #: Lanes this chain keeps at most (1 to 64).
    lanes: int = Field(ge=1, le=64)


class LanePayload(Payload):
    """One lane: a slice, then itself again; ``errors`` counts the failed slices in a row."""

    v: Literal[1] = 1
    name: str = Field(pattern=_NAME)
    chain: str = Field(min_length=1, max_length=64)
    errors: int = Field(default=0, ge=0)


class TenantPayload(Payload):
    """One tenant of a fan-out (:meth:`~mongoshift.celery.MongoshiftTasks.enqueue_tenants`): ``command`` on the
    tenant database ``tenant``, part of ``group``. The tenant's cluster is found again by the worker from the
    ``[tenants]`` selection, so no URI crosses the broker."""

    v: Literal[1] = 1
    command: Literal["up", "down", "converge"]
    tenant: str = Field(pattern=r'^[^/\\. "$*<>:|?\x00]{1,63}$')
    group: str = Field(min_length=1, max_length=64)
    #: Unix time after which a task still waiting for the tenant's lock gives up (``locked``).
    wait_until: float = Field(gt=0, allow_inf_nan=False)


def parse[P: Payload](model: type[P], task: str, data: Any) -> P:
    """``data`` as a ``model``, or :class:`TaskInvalidError` saying which field is wrong (never its value)."""
    if not isinstance(data, dict):
        raise TaskInvalidError(f"{task}: the payload is a {type(data).__name__}, not a mapping", task=task)
    version = data.get("v")
    if "v" not in data:
        raise TaskInvalidError(f"{task}: the payload has no version 'v'", task=task)
    if isinstance(version, bool) or not isinstance(version, int):  # "2", 2.0, true: named by type, never by value
        raise TaskInvalidError(f"{task}: the payload's version 'v' is a {type(version).__name__}, not a whole number", task=task)
    if version not in VERSIONS:
        raise TaskInvalidError(
            f"{task}: payload version {version} is not one this worker reads ({', '.join(map(str, VERSIONS))}): "
            "upgrade mongoshift on the workers before the producers",
            task=task,
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = [f"{'.'.join(str(p) for p in err['loc']) or 'payload'}: {err['type']}" for err in exc.errors()]
        raise TaskInvalidError(f"{task}: invalid payload ({'; '.join(problems)})", task=task, problems=problems) from None
