"""Converge as an async Python API; ``mongoshift converge`` calls it.

Declarations are read before connecting, so a bad file costs no server round
trip, and only once per run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pymongo import AsyncMongoClient

from ..converge.orchestrator import (
    REASON_LIMIT,
    REQUESTED_BY_LIMIT,
    converge_in_session,
    plan_in_session,
)
from ..converge.report import ConvergeReport
from ..errors import ConfigInvalidError
from ..project.declarations import declarations_by_name
from ..project.events import Observer
from ..project.redaction import recorded_text
from ..project.run import CancelSignal
from ..project.session import Project, open_session, warn_unlocked
from ..project.settings import Settings
from ..schema.collections import CollectionDeclaration
from .options import DEFAULT_LOCK, Confirmation, Lock, checked_flags, checked_lock, confirm_parts, one_shot, run_observers


def declaration_for(settings: Settings, name: str) -> CollectionDeclaration | None:
    """One declared collection (its indexes, validator, ``versioning.field``), or None: read without connecting,
    so that application code and background migrations use the project's declaration instead of repeating it."""
    if not isinstance(name, str):
        raise ConfigInvalidError(f"a collection name is text, not {type(name).__name__}")
    return declarations_by_name(one_shot(settings).settings).get(name)


async def plan_converge(
    settings: Settings,
    *,
    prune: bool = False,
    check: bool = False,
    declarations: Sequence[CollectionDeclaration] | None = None,
    client: AsyncMongoClient[Any] | None = None,
) -> ConvergeReport:
    """One-shot ``Mongoshift.collections.plan`` (:func:`plan_converge_in`)."""
    return await plan_converge_in(one_shot(settings, client=client), prune=prune, check=check, declarations=declarations)


async def plan_converge_in(
    project: Project, *, prune: bool = False, check: bool = False, declarations: Sequence[CollectionDeclaration] | None = None
) -> ConvergeReport:
    """Plan without the lock and without writing anything (``--dry-run`` and ``--check``).

    ``declarations``: plan these instead of the project's (they are not checked against the own collections).
    """
    settings = project.settings
    checked_flags(prune=prune, check=check)
    declared = declarations_by_name(settings) if declarations is None else _given(declarations)
    async with open_session(
        settings, take_lock=False, with_files=False, cancel=project.cancel, declarations=declared, project=project
    ) as session:
        return await plan_in_session(session, prune=prune, check=check)


def _given(declarations: object) -> dict[str, CollectionDeclaration]:
    """``declarations=``: a list of :class:`CollectionDeclaration` (``ms.collections.declaration(name)`` gives one),
    by name; anything else is refused before connecting (a string or a mapping was an AttributeError)."""
    if isinstance(declarations, (str, bytes)) or not isinstance(declarations, Iterable):
        raise ConfigInvalidError(f"declarations must be a list of CollectionDeclaration, not {type(declarations).__name__}")
    listed = list(declarations)
    for item in listed:
        if not isinstance(item, CollectionDeclaration):
            raise ConfigInvalidError(f"declarations must be a list of CollectionDeclaration, not a list holding {type(item).__name__}")
    return {d.name: d for d in listed}


async def converge(
    settings: Settings,
    *,
    prune: bool = False,
    confirm: Confirmation = False,
    lock: Lock = DEFAULT_LOCK,
    requested_by: str | None = None,
    reason: str | None = None,
    cancel: CancelSignal | None = None,
    observers: Iterable[Observer] = (),
    client: AsyncMongoClient[Any] | None = None,
) -> ConvergeReport:
    """One-shot ``Mongoshift.collections.converge`` (:func:`converge_in`)."""
    project = one_shot(settings, client=client, observers=observers, cancel=cancel)
    return await converge_in(project, prune=prune, confirm=confirm, lock=lock, requested_by=requested_by, reason=reason)


async def converge_in(
    project: Project,
    *,
    prune: bool = False,
    confirm: Confirmation = False,
    lock: Lock = DEFAULT_LOCK,
    requested_by: str | None = None,
    reason: str | None = None,
) -> ConvergeReport:
    """Make the server match the declarations, under the migration lock.

    Destructive actions (rebuilds, drops) need ``confirm=True`` or a ``confirm`` callback
    that answers True; without either they are refused before anything is written. Raises
    :class:`~mongoshift.errors.ConvergeFailedError` on a conflict or a failed action (the
    report is in ``details["converge"]``). ``requested_by`` (at most 128 characters; default:
    who runs it) and ``reason`` (at most 512) are recorded in the converge log: a worker's OS
    user says little.
    """
    settings = project.settings
    lock = checked_lock(lock)
    checked_flags(prune=prune)
    yes, ask = confirm_parts(confirm)
    requested_by = recorded_text("requested_by", requested_by, REQUESTED_BY_LIMIT)  # before connecting
    reason = recorded_text("reason", reason, REASON_LIMIT)
    declared = declarations_by_name(settings)
    async with open_session(
        settings,
        take_lock=lock.take,
        wait=lock.wait,
        cancel=project.cancel,
        with_files=False,
        declarations=declared,
        command="converge",
        observers=run_observers(project.observers, settings),
        project=project,
    ) as session:
        warn_unlocked(not lock.take)
        return await converge_in_session(session, prune=prune, yes=yes, confirm=ask, requested_by=requested_by, reason=reason)
