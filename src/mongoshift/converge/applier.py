"""Making the plan happen, collection by collection, in the planner's fixed order.

Before touching a collection its state is read and planned again: between the
plan and this moment an application may have created an index, or an old
writer may have put a document below a new ``min``. A conflict found then, or
a destructive step nobody approved, stops the run.

In-place changes are *tried*: when the server refuses ``collMod`` (an older
server, or one without it) the index is rebuilt instead, which is
destructive, so only with ``--yes`` or a yes at the prompt. A rebuild drops
and re-creates the index; if the create fails the old index is put back.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import OperationFailure, PyMongoError

from ..project.redaction import describe_error
from ..project.server_errors import coll_mod_refused, error_code, index_not_found
from ..schema.collections import CollectionDeclaration
from .inspection import inspect
from .planner import Action, plan_collection

log = logging.getLogger("mongoshift.converge")

Status = Literal["planned", "applied", "failed", "skipped", "ok", "refused"]
#: Asked before destructive actions (rebuilds, drops) when ``--yes`` was not given.
Confirm = Callable[[list[Action]], Awaitable[bool]]



@dataclass
class ActionResult:
    """An action and what became of it."""

    action: Action
    status: Status
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        body = self.action.to_json(self.status)
        body["error"] = self.error
        return body


class ApplyFailed(Exception):
    """An action failed: the run stops after this collection."""


class ApplyStopped(Exception):
    """The stop signal (Ctrl-C, cancel, a lost lock) came between two steps of a collection.

    ``results`` holds what was done and the rest as skipped; ``error`` is what to raise.
    """

    def __init__(self, results: list[ActionResult], error: BaseException) -> None:
        super().__init__(str(error))
        self.results = results
        self.error = error


_GEO_VALUE = "a document holds a value this geo index cannot take: fix or remove it, then converge again"

#: What to do when ``createIndexes`` (or ``collMod``'s conversion to unique, 359) fails with one of these server codes.
BUILD_HINTS: dict[int, str] = {
    11000: "remove the duplicates (or declare the index without unique), then converge again",
    359: "the collection holds duplicates of this key: remove them (or declare the index without unique), then converge again",
    13: "the user needs the createIndex privilege on this collection",
    67: "the server refuses this index definition: check its options",
    16755: _GEO_VALUE,  # 2dsphere: the geometry cannot be read
    16756: _GEO_VALUE,  # 2dsphere: the geometry gives no key
    13026: _GEO_VALUE,  # 2d: not a coordinate pair
    13027: _GEO_VALUE,  # 2d: outside the index's min and max
    17262: "a document's language field holds a language text indexes do not support: declare language_override as a field "
    "the documents do not use, or fix those documents, then converge again",
}


def build_failure(exc: PyMongoError) -> str:
    """Why ``createIndexes`` failed, with what to do about it when the code says."""
    why = describe_error(exc)
    hint = BUILD_HINTS.get(error_code(exc) or 0)
    return f"{why}; {hint}" if hint else why


def _create_document(document: Mapping[str, Any]) -> dict[str, Any]:
    """An index document as ``createIndexes`` takes it back (without what only listIndexes adds)."""
    return {k: v for k, v in document.items() if k not in ("v", "ns", "background")}


class Applier:
    """Applies the approved actions of one run."""

    def __init__(
        self, db: AsyncDatabase[Any], *, yes: bool, confirm: Confirm | None, check_stop: Callable[[], None] | None = None
    ) -> None:
        self.db = db
        self.yes = yes
        self.confirm = confirm
        #: Raises when the run must stop; called before every step that writes.
        self.check_stop = check_stop or (lambda: None)
        self._stop_error: Exception | None = None

    async def _consent(self, actions: list[Action]) -> bool:
        if self.yes:
            return True
        if self.confirm is None:
            return False
        return await self.confirm(actions)

    async def apply_collection(
        self, declaration: CollectionDeclaration, approved: list[Action], *, prune: bool, replanned: bool = False
    ) -> list[ActionResult]:
        """Re-plan one collection, check it against what was approved, then apply it in order.

        Raises :class:`ApplyFailed` (with the results so far as its argument) when something fails,
        and :class:`ApplyStopped` when the stop signal comes before a step. When the collection's
        ``create`` fails because something else created it meanwhile, the collection is planned
        once more (``replanned``) from what now exists.
        """
        state = await inspect(self.db, declaration)
        actions = plan_collection(declaration, state, prune=prune)
        conflicts = [a for a in actions if a.action == "conflict"]
        approved_keys = {a.key for a in approved if a.destructive}
        unapproved = [a for a in actions if a.destructive and a.key not in approved_keys]
        if conflicts or unapproved:
            raise ApplyFailed([ActionResult(a, "refused", "found when re-planning before applying") for a in conflicts + unapproved])
        results: list[ActionResult] = []
        failed = False
        creates = [a for a in actions if a.target == "index" and a.action == "create"]
        created = False
        for action in actions:  # already in application order
            if not action.changing:
                results.append(ActionResult(action, "ok"))
            elif action in creates and created:
                continue  # listed once, with the batch's outcome
            elif failed:
                results.append(ActionResult(action, "skipped", "an earlier action of this collection failed"))
            elif stopped := self._stop_now():
                listed = {id(r.action) for r in results}
                why = stopped  # the stop's own words (converge stopped (...); the steps after it were skipped)
                results += [
                    ActionResult(a, "skipped", why) if a.changing else ActionResult(a, "ok")
                    for a in actions
                    if id(a) not in listed
                ]
                raise ApplyStopped(results, self._stop_error or RuntimeError(stopped))
            elif action in creates:
                created = True
                batch = await self._create_indexes(declaration.name, creates)
                results += batch
                failed = any(r.status == "failed" for r in batch)
            else:
                result = await self._apply(action, declaration if not replanned else None)
                if result is None:  # created meanwhile by someone else: plan it again from what exists
                    return await self.apply_collection(declaration, approved, prune=prune, replanned=True)
                results.append(result)
                failed = result.status == "failed"
        if failed:
            raise ApplyFailed(results)
        return results

    def _stop_now(self) -> str | None:
        """The stop reason when the run must stop before the next step, else None."""
        try:
            self.check_stop()
        except Exception as exc:  # the caller's own error type (aborted, lock lost)
            self._stop_error = exc
            return getattr(exc, "message", None) or str(exc) or type(exc).__name__
        return None

    # ------------------------------------------------------------ the actions

    async def _apply(self, action: Action, declaration: CollectionDeclaration | None = None) -> ActionResult | None:
        """Make one action; None when the collection to create exists by now (only with ``declaration``)."""
        try:
            if action.target == "collection":
                try:
                    await self.db.command({"create": action.collection, **dict(action.after or {})})
                except PyMongoError:
                    if declaration is not None and (await inspect(self.db, declaration, probe=False)).exists:
                        log.info("%s: created by someone else since it was read; planned again", action.collection)
                        return None
                    raise
            elif action.target == "validator":
                return await self._validator(action)
            elif action.action == "modify":
                return await self._modify(action)
            elif action.action == "rebuild":
                return await self._rebuild(action)
            elif action.action == "drop":
                await self._drop(action.collection, action.name or "")
        except PyMongoError as exc:
            log.error("%s failed: %s", action.describe(), describe_error(exc))
            return ActionResult(action, "failed", describe_error(exc))
        log.info("%s", action.describe())
        return ActionResult(action, "applied")

    async def _validator(self, action: Action) -> ActionResult:
        try:
            await self.db.command({"collMod": action.collection, **dict(action.after or {})})
        except OperationFailure as exc:
            why = describe_error(exc)
            if coll_mod_refused(exc):
                why = f"the server refused collMod, so the validator cannot be changed here ({why})"
            return ActionResult(action, "failed", why)
        log.info("%s", action.describe())
        return ActionResult(action, "applied")

    async def _create_indexes(self, collection: str, creates: list[Action]) -> list[ActionResult]:
        """One ``createIndexes`` for every new index of the collection."""
        if not creates:
            return []
        try:
            await self.db.command({"createIndexes": collection, "indexes": [dict(a.after or {}) for a in creates]})
        except PyMongoError as exc:
            why = build_failure(exc)
            log.error("%s: createIndexes of %s failed: %s", collection, ", ".join(a.name or "" for a in creates), why)
            return [ActionResult(a, "failed", why) for a in creates]
        for action in creates:
            log.info("%s", action.describe())
        return [ActionResult(a, "applied") for a in creates]

    async def _coll_mod_index(self, collection: str, name: str, **options: Any) -> None:
        await self.db.command({"collMod": collection, "index": {"name": name, **options}})

    async def _modify(self, action: Action) -> ActionResult:
        """collMod per changed option; a refusal turns into a rebuild (with consent)."""
        wanted = dict(action.after or {})
        name = action.name or ""
        try:
            if "expireAfterSeconds" in action.changes:
                await self._coll_mod_index(action.collection, name, expireAfterSeconds=wanted["expireAfterSeconds"])
            if "hidden" in action.changes:
                await self._coll_mod_index(action.collection, name, hidden=bool(wanted.get("hidden", False)))
            if "unique" in action.changes:
                await self._make_unique(action.collection, name)
        except OperationFailure as exc:
            if not coll_mod_refused(exc):
                return ActionResult(action, "failed", build_failure(exc))
            rebuild = replace(
                action,
                action="rebuild",
                reason=f"the server refused collMod ({describe_error(exc)}): rebuild instead (drop + create)",
            )
            if not await self._consent([rebuild]):
                return ActionResult(
                    rebuild,
                    "failed",
                    "the server refused the in-place change; converge again with --yes to rebuild the index (drop + create)",
                )
            return await self._rebuild(rebuild)
        log.info("%s", action.describe())
        return ActionResult(action, "applied")

    async def _make_unique(self, collection: str, name: str) -> None:
        """Two steps: ``prepareUnique`` stops new duplicates, then ``unique`` converts (fails on existing ones)."""
        await self._coll_mod_index(collection, name, prepareUnique=True)
        try:
            await self._coll_mod_index(collection, name, unique=True)
        except OperationFailure:
            try:
                await self._coll_mod_index(collection, name, prepareUnique=False)
            except PyMongoError:
                log.warning("%s: could not clear prepareUnique on %s after the failed conversion", collection, name)
            raise

    async def _drop(self, collection: str, name: str) -> None:
        try:
            await self.db.command({"dropIndexes": collection, "index": name})
        except OperationFailure as exc:
            if not index_not_found(exc):
                raise

    async def _rebuild(self, action: Action) -> ActionResult:
        """Drop, then create; a failed create puts the old index back."""
        old = _create_document(action.before or {})
        drop_name = action.replaces or action.name or ""
        try:
            await self._drop(action.collection, drop_name)
        except PyMongoError as exc:
            return ActionResult(action, "failed", describe_error(exc))
        try:
            await self.db.command({"createIndexes": action.collection, "indexes": [dict(action.after or {})]})
        except PyMongoError as exc:
            why = build_failure(exc)  # a unique rebuild over duplicates is the usual cause: say what to do, as a create does
            try:
                if old:
                    await self.db.command({"createIndexes": action.collection, "indexes": [old]})
                why += f"; the old index {drop_name!r} was restored"
            except PyMongoError as again:
                why += f"; the old index {drop_name!r} could NOT be restored: {describe_error(again)}"
            log.error("%s failed: %s", action.describe(), why)
            return ActionResult(action, "failed", why)
        log.info("%s", action.describe())
        return ActionResult(action, "applied")
