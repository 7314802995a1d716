"""Background files as steps of the migration line: the one door from :mod:`mongoshift.line` into the engine.

``up`` registers a background file (no document is touched) and ``down``
registers its revert; the ``requires`` gate asks whether the migrations a file
waits for are done; ``background_inline`` runs one to the end in the same run.
The runner reaches the engine only through :class:`BackgroundSteps`, so the
edge between the two packages stays one-way and small.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from ..project.loader import MigrationFile
from ..project.session import Session
from ..schema.background import Background
from .inspect.input_probe import missing_collection_warning, not_a_version_warning, unversioned_warning
from .inspect.requires import Waiting, unmet
from .lanes.engine import start_engine
from .plan.declared import align_file
from .registry.registration import refuse_one_way, refuse_stranding, register, revert_or_withdraw
from .state.events import Events, shown_by_caller
from .state.model import State
from .state.store import BackgroundStore

__all__ = ["BackgroundSteps", "Waiting"]


class BackgroundSteps:
    """What the migration line does with background files, on one session."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.store = BackgroundStore(session.db, session.settings.background_collection, create_indexes=session.settings.ensure_indexes)

    def align(self, item: MigrationFile) -> None:
        """Take the declared version fields into a loaded background file (a no-op for others)."""
        align_file(item, self.session.declarations())

    async def register(self, name: str, spec: Background, *, checksum: str, requires: list[str]) -> list[str]:
        """Register the forward run; returns what registration noticed (counts only)."""
        by = self.session.run.executed_by
        events = Events(self.session.events.observers, run_id=self.session.run.run_id)  # the run's observers hear ``registered``
        with shown_by_caller("registered"):  # the line says the outcome itself, in words and in its results
            return await register(
                self.store, name, spec, checksum=checksum, direction="forward", by=by, requires=requires, changelog=self.session.changelog, events=events
            )

    async def revert(self, name: str, spec: Background, *, checksum: str) -> str:
        """Register the revert (``"revert"``), or withdraw one that never rewrote a document (``"withdrawn"``)."""
        with shown_by_caller("registered"):  # the line says "revert registered" itself, once
            return await revert_or_withdraw(self.store, name, spec, checksum=checksum, by=self.session.run.executed_by)

    async def refuse_one_way(self, name: str, spec: Background, leaving: Collection[str] = ()) -> None:
        """Refuse a rollback of ``name`` that could not be done (read only): one-way, and it rewrote documents (13);
        a later migration of its collection, not in ``leaving`` (this rollback's), goes on from its target (23)."""
        await refuse_one_way(self.store, name, spec)
        await refuse_stranding(self.store, name, spec, leaving)

    async def unmet(self, name: str, *, reopen: bool) -> list[Waiting]:
        """What of ``name`` is not done yet, for the ``requires`` gate (``reopen``: a completed one that left work).

        An ordinary migration is judged by the changelog; a name nothing knows comes back ``unknown``."""
        return await unmet(
            self.store, [name], changelog=self.session.changelog, files=self.session.files, by=self.session.run.executed_by, reopen=reopen
        )

    async def run_inline(self, name: str, spec: Background, *, checksum: str) -> State | None:
        """Run one to the end in this run, on its connection and under its lock (``background_inline``)."""
        engine = await start_engine(self.session, observers=self.session.events.observers)
        return await engine.migration_run().run(name, spec, concurrency=spec.max_parallel, checksum=checksum)

    async def registration_warnings(self, steps: Iterable[tuple[str, MigrationFile]]) -> list[str]:
        """What registering these background files would warn about (read only, for ``dry-run``)."""
        earlier: list[Background] = []
        found: list[str] = []
        for name, item in steps:
            self.align(item)
            spec = item.background
            if spec is None:
                continue
            missing = await missing_collection_warning(self.session.db, name, spec)
            warning = await unversioned_warning(self.session.db, self.store, name, spec, planned_before=earlier)
            odd = await not_a_version_warning(self.session.db, name, spec)
            found += [said for said in (missing, warning, odd) if said]
            earlier.append(spec)
        return found

    async def shown_state(self, name: str, *, reverted: bool = False) -> str | None:
        """The background state a file shows in ``status``: an applied one's own status; for a
        ``reverted`` one the revert still to run (``revert pending``, ``revert running``...), since
        ``down`` only registered it and the documents keep the new shape until a runner reverts them.
        None once that revert completed (or when there is none: a withdrawn one-way migration)."""
        state = await self.store.state(name)
        if reverted:
            return None if state is None or state.direction != "revert" or state.status == "completed" else f"revert {state.status}"
        if state is None:
            return "unregistered"
        return state.status if state.direction == "forward" else f"revert {state.status}"
