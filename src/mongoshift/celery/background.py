"""Background migrations on a job system: a coordinator chain and its lanes, one step or slice per task.

The coordinator task takes one step (``ms.background.coordinate`` on a session that also
renews the chain's hold), starts the lanes it hands out, and asks again after a poll until the migration is done; one chain per
migration, held by its ``background:<name>`` intent (a lost chain's intent lapses after
``chain_ttl_seconds``, and the next :meth:`~mongoshift.celery.MongoshiftTasks.start_background`,
or the beat's background tick, starts a new one). A lane task runs one slice
(:func:`mongoshift.api.run_background_slice`) and asks again while its slices do work. The
leases stay in MongoDB: a worker killed mid-slice leaves a lease that lapses after
``background_lease_ttl_seconds``, and the next slice reaps it and goes on from the checkpoint,
exactly as with ``mongoshift background run``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from .. import api
from ..errors import MongoshiftError, NotAppliedError
from .checks import LEASE_MAX_SECONDS, check_number
from .payloads import CoordinatorPayload, LanePayload
from .results import BackgroundResult

log = logging.getLogger("mongoshift.celery")

#: Slice outcomes after which a lane asks for another slice at once; any other ends the lane
#: (the coordinator starts lanes again while partitions are open).
WORKING = frozenset({"yielded", "done"})


@dataclass(frozen=True)
class BackgroundOptions:
    """How the background chain paces itself."""

    #: Seconds between two coordinator steps (None: the project's ``background_poll_seconds``).
    poll_seconds: float | None = None
    #: Seconds a coordinator chain holds its migration without a step: a lost chain frees it then.
    chain_ttl_seconds: float = 60.0
    #: Failed slices in a row after which a lane gives up (the coordinator starts another later).
    max_lane_errors: int = 8

    def __post_init__(self) -> None:
        if self.poll_seconds is not None:
            check_number("BackgroundOptions", "poll_seconds", self.poll_seconds, minimum=0, above=True)
        check_number("BackgroundOptions", "chain_ttl_seconds", self.chain_ttl_seconds, minimum=0, above=True, maximum=LEASE_MAX_SECONDS)
        check_number("BackgroundOptions", "max_lane_errors", self.max_lane_errors, minimum=1, whole=True)


@dataclass(frozen=True)
class Again:
    """Ask again in ``countdown`` seconds, with ``payload``."""

    countdown: float
    payload: CoordinatorPayload | LanePayload


@dataclass(frozen=True)
class Tick:
    """One coordinator step: lanes to start, and either the chain's next step or its final result."""

    lanes: int
    next: Again | BackgroundResult


def chain_key(name: str) -> str:
    return f"background:{name}"


def poll_of(settings: api.Settings, options: BackgroundOptions) -> float:
    return options.poll_seconds if options.poll_seconds is not None else settings.background_poll_seconds


async def hold_chain(ms: api.Mongoshift, name: str, chain: str, ttl: float) -> bool:
    """Renew ``chain``'s hold on the migration, or take it when nobody live holds it."""
    key = chain_key(name)
    if await ms.intents.settle(key, chain, "running", ttl_seconds=ttl):
        return True
    return (await ms.intents.claim([api.Claim(key, chain, ttl)]))[0]


async def claim_chain(settings: api.Settings, name: str, claim: api.Claim) -> bool:
    """Hold ``name`` for a new chain; False when a live chain holds it. A name that is not registered
    raises :class:`NotAppliedError` first: a chain for it would only end at its first step, and
    ``started=True`` would have said otherwise."""
    async with api.connect(settings) as ms:
        await ms.background.status(name)
        return (await ms.intents.claim([claim]))[0]


async def coordinate(
    settings: api.Settings, payload: CoordinatorPayload, options: BackgroundOptions, observers: Sequence[api.Observer] = ()
) -> Tick:
    """One step of the chain; an error of the step itself (a lost connection) is logged and asked again."""
    poll = poll_of(settings, options)
    again = Again(poll, payload)
    opened = False
    try:
        async with api.connect(settings, observers=observers) as ms:  # one connection for the hold, the step and the release
            opened = True
            if not await hold_chain(ms, payload.name, payload.chain, options.chain_ttl_seconds):
                return Tick(0, BackgroundResult(payload.name, None, "another coordinator chain runs this migration"))
            try:
                step = await ms.background.coordinate(payload.name)
            except NotAppliedError as exc:
                await ms.intents.settle(chain_key(payload.name), payload.chain, None, ttl_seconds=1)
                return Tick(0, BackgroundResult(payload.name, None, api.redact(exc.message)))
            if step.next == "done":
                await ms.intents.settle(chain_key(payload.name), payload.chain, None, ttl_seconds=1)
                reason = step.reason
                if step.status == "failed":  # its reason was the status again ("failed"): the caller learns why, as status says it
                    (report,) = await ms.background.status(step.name)
                    reason = api.redact(report.last_error) if report.last_error else reason
                return Tick(0, BackgroundResult(step.name, step.status, reason))
            if step.next == "wait" and step.reason:
                log.info("%s: waiting: %s", step.name, step.reason)
            return Tick(min(step.lanes, payload.lanes) if step.next == "process" else 0, again)
    except MongoshiftError as exc:
        if opened:
            log.warning("%s: a coordinator step failed: %s; asking again", payload.name, api.describe_error(exc))
        else:
            log.warning("%s: coordinator cannot connect (%s); asking again", payload.name, exc.kind)
        return Tick(0, again)
    except Exception as exc:  # the chain outlives a failed step, as the CLI runner's loop does
        log.warning("%s: a coordinator step failed: %s; asking again", payload.name, api.describe_error(exc))
        return Tick(0, again)


async def lane(
    settings: api.Settings, payload: LanePayload, options: BackgroundOptions, observers: Sequence[api.Observer] = ()
) -> Again | api.SliceReport:
    """One slice; ask again at once after work, after a backoff after a failed slice, else end."""
    try:
        report = await api.run_background_slice(settings, payload.name, observers=observers)
    except MongoshiftError as exc:
        report = api.SliceReport(payload.name, "error", None, error=api.redact(exc.message))
    except Exception as exc:  # counted as a failed slice
        report = api.SliceReport(payload.name, "error", None, error=api.describe_error(exc))
    if report.outcome in WORKING:
        return Again(0, payload.model_copy(update={"errors": 0}))
    if report.outcome == "error" and payload.errors + 1 < options.max_lane_errors:
        errors = payload.errors + 1
        return Again(min(60.0, 0.5 * 2**errors), payload.model_copy(update={"errors": errors}))
    return report
