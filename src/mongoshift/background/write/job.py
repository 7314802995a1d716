"""A registered migration bound to its code: which direction, what it matches, which functions.

How the user's functions are called (see docs/background.md, "Sync and async functions"): an
``async def`` runs on the event loop; a plain ``def`` runs in a worker thread, once per batch
(``migrate`` is called for every document of the batch inside that one thread call), so that
however long it blocks, the loop keeps renewing the lane's lease and the migration lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...project.events import Events
from ...project.migration_log import MigrationLog, correlated
from ...project.run import BodyCancel, CancelSignal
from ...schema.background import Background
from ..state.model import State
from .document import version_match

log = logging.getLogger("mongoshift.background")


def old_shape(filter_: dict[str, Any], version_field: str, source: int, bad_ids: Sequence[Any] = ()) -> dict[str, Any]:
    """The old shape: what a pass still rewrites (the filter at the source version), minus documents that failed.

    The one definition: the passes, the count that closes them and the drift probe all use it."""
    base = {**filter_, **version_match(version_field, source)}
    if bad_ids:
        return {"$and": [base, {"_id": {"$nin": list(bad_ids)}}]}
    return base


def stored_old_shape(state: State) -> dict[str, Any]:
    """:func:`old_shape` of a forward migration from its stored settings: no file needed to look."""
    spec = state.spec
    return old_shape(spec.get("filter") or {}, spec["version_field"], spec["from_version"], state.bad_ids)


@dataclass
class TransformContext:
    """The second argument of ``migrate(doc, ctx)`` and friends; ``log`` as a migration's ``ctx.log``."""

    name: str
    collection: str
    direction: str
    generation: int
    partition: str
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger]
    cancelled: CancelSignal
    session: Any = None
    db: Any = None
    client: Any = None
    checkpoint: Any = None
    deadline: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    log: MigrationLog | None = None


@dataclass
class Job:
    name: str
    spec: Background
    direction: str
    generation: int
    source: int
    target: int
    one: Callable[..., Any] | None
    many: Callable[..., Any] | None
    step: Callable[..., Any] | None
    bad_ids: list[Any]
    registration: str = ""
    pipeline: list[dict[str, Any]] | None = None
    #: The shard key's fields when known (detected or configured): every guarded write carries them.
    shard_key: tuple[str, ...] = ()

    @classmethod
    def of(cls, state: State, spec: Background) -> Job:
        job = cls.of_spec(state.name, spec, state.direction)
        job.generation = state.generation
        job.bad_ids = list(state.bad_ids)
        job.registration = state.registration
        return job

    @classmethod
    def of_spec(cls, name: str, spec: Background, direction: str) -> Job:
        """The file's functions for ``direction``, without a registration (a preview needs none)."""
        forward = direction == "forward"
        return cls(
            name=name,
            spec=spec,
            direction=direction,
            generation=0,
            source=spec.from_version if forward else spec.to_version,
            target=spec.to_version if forward else spec.from_version,
            one=spec.migrate if forward else spec.revert,
            many=spec.migrate_batch if forward else spec.revert_batch,
            step=spec.step if forward else spec.revert_step,
            bad_ids=[],
            pipeline=spec.pipeline if forward else spec.revert_pipeline,
        )

    @property
    def revision_field(self) -> str | None:
        return self.spec.revision_field if self.spec.occ == "revision" else None

    @property
    def projection(self) -> dict[str, int] | None:
        """What a batch read needs: only the ``_id`` when the server runs the transform, plus the
        shard key's fields when it is known, which every pipeline write filter carries."""
        if self.pipeline is None:
            return None
        return {"_id": 1, **dict.fromkeys(self.shard_key, 1)}

    def match(self, *, exclude_bad: bool = True) -> dict[str, Any]:
        """What is still to rewrite: the filter at the source version, minus documents that failed."""
        return old_shape(self.spec.filter, self.spec.version_field, self.source, self.bad_ids if exclude_bad else ())

    def context(self, partition: str, cancel: CancelSignal, events: Events | None = None, **extra: Any) -> TransformContext:
        """``events``: where ``ctx.log`` lines go (none: a preview, whose lines reach no observer)."""
        events = events or Events()
        logger = correlated(log.getChild(self.name.removesuffix(".py")), events.run_id, self.name, self.direction, 1)
        return TransformContext(
            name=self.name,
            collection=self.spec.collection,
            direction=self.direction,
            generation=self.generation,
            partition=partition,
            logger=logger,
            cancelled=BodyCancel(cancel),  # ``if ctx.cancelled:`` reads it, as in a migration (README)
            log=MigrationLog(events, logger, self.name, self.direction, 1),
            **extra,
        )
