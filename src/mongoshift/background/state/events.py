"""Events of background migrations, through the shared observer interface and the stdlib logger.

Kinds: ``registered``, ``partitioned``, ``pass``, ``slice_start``, ``slice_end``,
``batch``, ``lease_lost``, ``reclaimed`` (expired leases of stopped lanes freed),
``throttle``, ``control``, ``completed``, ``failed``, ``drift``
(``background verify``: found, stranded, and what was done; the live watcher: ``upgraded``,
``failed`` or ``reported`` (``stranded``), ``source="stream"``), ``watch`` (a live watcher's new state; its ``migration`` is the collection)
and ``log`` (a transform's ``ctx.log`` line).
Events carry counts and names, never a document or an ``_id``. A lane emits at most one
``throttle`` every 10 s, counting the changes folded into it (:class:`..lanes.throttle.ThrottleReport`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from ...project.events import Event, Events as LineEvents, Observer
from ...project.wording import plural

__all__ = ["NOTABLE", "Event", "Events", "Observer", "shown_by_caller"]

log = logging.getLogger("mongoshift.background")

#: Kinds logged at INFO; the rest (per batch, per slice) at DEBUG.
NOTABLE = frozenset(
    {"registered", "unblocked", "partitioned", "pass", "lease_lost", "reclaimed", "throttle", "control", "completed", "failed", "drift", "watch"}
)


#: Kinds whose outcome the running command prints itself; see :func:`shown_by_caller`.
_shown: ContextVar[frozenset[str]] = ContextVar("mongoshift_background_shown", default=frozenset())


@contextmanager
def shown_by_caller(*kinds: str) -> Iterator[None]:
    """Within it, events of ``kinds`` are logged at DEBUG: the command prints their outcome
    (a control's line, ``verify``'s table), and saying it twice on a terminal is noise.
    Observers still get every event; ``-v`` still shows the lines."""
    token = _shown.set(_shown.get() | frozenset(kinds))
    try:
        yield
    finally:
        _shown.reset(token)


class Events(LineEvents):
    """The shared event fan-out (:mod:`mongoshift.project.events`), logged at the engine's levels."""

    def log(self, event: Event) -> None:
        kind, data = event.kind, event.data
        if kind == "log":  # ctx.log in a transform wrote its own line on the migration's logger
            return
        noisy = (kind == "throttle" and data.get("overloads")) or (
            kind == "drift" and (data.get("found") or data.get("stranded")) and data.get("action") != "upgraded"
        )
        if kind in _shown.get():
            level = logging.DEBUG
        elif kind in ("failed", "lease_lost") or noisy:
            level = logging.WARNING
        else:
            level = logging.INFO if kind in NOTABLE else logging.DEBUG
        if log.isEnabledFor(level) and kind == "throttle":  # a change of pace says why, in words
            # Each lane paces its own partition: two lines in a row may give two different sizes.
            whose = f" (partition {data['partition']})" if data.get("partition") is not None else ""
            log.log(level, "%s throttle%s: %s", event.migration, whose, describe_throttle(data))
        elif log.isEnabledFor(level) and kind == "drift":  # and a finding says what it means and what to do
            log.log(level, "%s drift: %s", event.migration, describe_drift(data, event.migration))
        elif log.isEnabledFor(level) and kind == "watch" and data.get("state") in WATCH_STATES:
            log.log(level, "%s watch: %s, %s", event.migration, data["state"], WATCH_STATES[data["state"]])
        elif log.isEnabledFor(level) and kind in _SENTENCES:
            log.log(level, "%s %s: %s", event.migration, kind, _SENTENCES[kind](data))
        elif log.isEnabledFor(level):
            details = " ".join(f"{k}={v}" for k, v in data.items())
            log.log(level, "%s %s %s", event.migration, kind, details)


#: What each state of a collection's live watcher means, for its log line (docs/background.md, "The live watcher").
WATCH_STATES = {
    "following": "another process leads this collection's watch; this one takes over if that one stops",
    "catching_up": "looking for old shapes written before the stream opened",
    "streaming": "upgrading old-shape documents as they are written",
    "history_lost": "the server no longer holds the saved position: starting from now, after a look for what was missed",
    "overloaded": "the events read are older than --max-lag: its migrations are reopened for a pass, which is faster",
    "fallback": "not allowed to watch the collection: polling for old shapes instead",
    "suspended": "a revert of the collection is under way: upgrading nothing until it ends",
    "idle": "no completed migration of the collection to guard (one that is reopened is guarded again once it completes)",
    "stopped": "this process no longer watches it (a stop was asked, or its leadership ended)",
}


def _number(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    return f"{value:,}" if isinstance(value, int) else "?"


def _count(data: dict[str, Any], key: str, noun: str, many: str | None = None) -> str:
    """``1 batch``, ``3 batches``; ``? batches`` when an older record lacks the field."""
    value = data.get(key)
    return plural(value, noun, many) if isinstance(value, int) else f"? {many or noun + 's'}"


def _completed(data: dict[str, Any]) -> str:
    said = (f"{_number(data, 'migrated')} migrated, {_number(data, 'skipped')} skipped, {_count(data, 'failed_documents', 'failed document')} "
            f"of {_number(data, 'scanned')} scanned, in {_count(data, 'batches', 'batch', 'batches')}; "
            f"{_count(data, 'retried', 'document')} re-read after an application write, "
            f"{_number(data, 'conflicts')} left to the next pass")
    return said + (f", {_count(data, 'txn_retries', 'transaction retry', 'transaction retries')}" if data.get("txn_retries") else "")


def _registered(data: dict[str, Any]) -> str:
    waits = data.get("blocked_on") or []
    direction = "the revert" if data.get("direction") == "revert" else "the migration"
    return f"{direction} is registered" + (f", and waits for {', '.join(map(str, waits))}" if waits else "")


#: The engine's notable events, each as a sentence (its fields go to observers and ``--log-format json`` as they are).
_SENTENCES: dict[str, Callable[[dict[str, Any]], str]] = {
    "registered": _registered,
    "unblocked": lambda data: "every migration it requires has completed: it may run now",
    "partitioned": lambda data: (
        "nothing to rewrite, no document of the old shape was found, so the pass has no partition"
        if data.get("partitions") == 0 else
        f"the pass is cut into {_count(data, 'partitions', 'partition')} over about {_count(data, 'estimate', 'document')}"
    ),
    "pass": lambda data: f"pass {_number(data, 'number')} starts: about {_count(data, 'remaining', 'document')} still in the old shape",
    "lease_lost": lambda data: (
        f"a lane lost its lease on partition {_number(data, 'partition')}: the migration was registered anew while it worked "
        "(its revert by 'down', or 'up' again), so the lane stops there and the new registration is cut and run on its own"
        if data.get("registered_anew") else
        f"a lane lost its lease on partition {_number(data, 'partition')} (it lapsed, or another runner took "
        "it over): the lane stops there, and the partition goes on from its last checkpoint under its new holder"
    ),
    "reclaimed": lambda data: (
        (
            "took over 1 lease of a runner of this host that died (kill -9, the OOM killer): its partition goes on from its checkpoint"
            if data.get("leases") == 1 else
            f"took over {_count(data, 'leases', 'lease')} of a runner of this host that died (kill -9, the OOM killer): "
            "their partitions go on from their checkpoints"
        )
        if data.get("holder") == "died" else
        (
            "freed 1 lease that had lapsed (its runner stopped, was killed, or made no progress for the lease's TTL): "
            "its partition goes on from its checkpoint"
            if data.get("leases") == 1 else
            f"freed {_count(data, 'leases', 'lease')} that had lapsed (their runner stopped, was killed, or made no progress "
            "for the lease's TTL): their partitions go on from their checkpoints"
        )
    ),
    "completed": _completed,
    "failed": lambda data: str(data.get("reason")),
}


def describe_drift(data: dict[str, Any], migration: str | None = None) -> str:
    """A ``drift`` event (``verify``, the live watcher) as one sentence: what was found in which
    collection, what was done, and what is left to do; counts and names only, never an id."""
    where = f"'{data.get('collection')}'"
    action, documents = data.get("action"), data.get("documents")
    some = "old-shape documents" if documents is None else plural(documents, "old-shape document")
    if action == "upgraded":
        return f"upgraded {some} of {where}"
    if action == "failed":
        name = (migration or "NAME").removesuffix(".py")
        return f"{some} of {where} could not be upgraded: reopened, so that a pass records why ('mongoshift background status {name}' shows it then)"
    if data.get("stranded") and not data.get("found"):
        count = "documents" if documents is None else plural(documents, "document")
        return f"{count} of {where} at a version no migration upgrades (stranded): reported (docs/background.md, \"Stranded documents\")"
    if action == "reopened":
        name = (migration or "NAME").removesuffix(".py")
        return (f"found {some} written after it completed in {where}: reopened for one more pass, which "
                f"'mongoshift background run {name}' (or a runner) makes; a watcher guards it again once it completes")
    if action == "reported":
        return f"found {some} written after it completed in {where}: reported ('background verify --reopen' gives it one more pass)"
    if action == "clean":
        return f"no old-shape document in {where}"
    reason, detail = data.get("reason"), data.get("detail")
    return f"{action} for {where}" + (f" ({reason}{': ' + str(detail) if detail else ''})" if reason else "")


def describe_throttle(data: dict[str, Any]) -> str:
    """A ``throttle`` event as one sentence: why the pace changed, the pace now, what was folded in."""
    change = data.get("change")
    latency, target = data.get("latency_ms"), data.get("target_ms")
    share, aim = data.get("work_percent"), data.get("target_percent")
    took = f"batches took {latency:,} ms on average to read, transform and write" if latency is not None else None
    if change == "slow":
        why = f"smaller, {took}, over the {target:,} ms target" if took else "smaller, batches were slow"
    elif change == "overload":
        why = "smaller, the server reported it is overloaded (a busy or timed-out write)"
    elif change == "conflicts":
        conflicted = data.get("conflict_percent")
        many = f"{conflicted}% of the documents" if conflicted is not None else "many documents"
        why = f"smaller, the application wrote {many} between their batch's read and write"
    elif change == "grow":
        why = f"larger, the lane worked {share}% of the time, under the {aim}% target ({took})" if share is not None else "larger"
    elif change == "shrink":
        why = f"smaller, the lane worked {share}% of the time, over the {aim}% target ({took})" if share is not None else "smaller"
    elif change == "recover":
        why = f"shorter adaptive pause, {took}, within the {target:,} ms target" if took else "shorter adaptive pause"
    elif change == "health":
        why = "waited for the server's health signals (replication lag or a health check)"
    else:
        why = str(change)
    parts = [why]
    if "batch_size" in data:
        size = data["batch_size"]
        # Slowed at the smallest batch, only the pause grows: say so, not "batch size now N" as if it shrank.
        smallest = size == data.get("min_batch_size") and change in ("slow", "overload")
        size_words = f"batch size at its smallest, {size:,}" if smallest else f"batch size now {size:,}"
        parts.append(f"{size_words}, adaptive pause {data.get('pause_ms', 0):,} ms before each batch")
    folded = f"{plural(data.get('changes', 1), 'change')} since the last report, {plural(data.get('overloads', 0), 'overload')}"
    if data.get("waited_ms"):
        folded += f", {data['waited_ms']:,} ms waited for health"
    parts.append(folded)
    return "; ".join(parts)
