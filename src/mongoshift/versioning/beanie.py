"""Beanie documents that keep the versioning contract: ``__v`` stamped on insert, ``__rev``
bumped by every save, replace and update, each one guarded by the revision that was read.

Import this module only where Beanie is installed (``pip install 'mongoshift[beanie]'``):
``import mongoshift.versioning`` never imports Beanie. The writes go through the same
helpers as hand-written code (:mod:`.revision`), so a conflict raises the same
:class:`RevisionConflictError`. What it does not cover is in docs/odm.md.
"""

from __future__ import annotations

from typing import Any, ClassVar, Self

from beanie import Document
from beanie.odm.actions import ActionDirections, ActionRegistry, EventTypes, wrap_with_actions
from beanie.odm.fields import ExpressionField
from beanie.odm.utils.dump import get_dict
from beanie.odm.utils.parsing import merge_models, parse_obj
from beanie.odm.utils.self_validation import validate_self_before
from beanie.odm.utils.state import save_state_after
from pydantic import ConfigDict, Field, PrivateAttr
from pymongo.asynchronous.client_session import AsyncClientSession

from .errors import RevisionConflictError, ShapeVersionError, UnguardedWriteError
from .fields import REVISION_FIELD, VERSION_FIELD
from .revision import find_one_and_update_with_revision, replace_with_revision
from .shapes import Shapes


class VersionedDocument(Document):
    """A Beanie ``Document`` whose writes keep ``__v`` and ``__rev``.

    Subclasses set ``shapes`` (from :func:`define_shapes`): ``insert`` stamps its
    ``current`` version and revision 1; ``save``/``replace`` write only while the stored
    revision is the one this instance holds, ``update``/``set``/``inc``/``save_changes`` too,
    and each bumps it. A miss raises :class:`RevisionConflictError`: read again and retry
    (``retry_on_conflict``). The version is kept as read: the model writes the shape its
    fields hold, and code that lifts a document sets ``shape_version`` itself.
    """

    # A stored value Beanie cannot parse (a corrupt __v or __rev, or any field) fails the read with pydantic's
    # ValidationError; that error names the field and the expected type, never the stored value (merged into
    # the subclass's own model_config, which may set it back).
    model_config = ConfigDict(hide_input_in_errors=True)

    shapes: ClassVar[Shapes]
    shape_version: int | None = Field(default=None, alias=VERSION_FIELD, ge=0)
    revision: int | None = Field(default=None, alias=REVISION_FIELD, ge=0)
    #: Read from the server (or written there): a legacy document read without a revision still is.
    _stored: bool = PrivateAttr(default=False)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # ``init_beanie`` initialises a model's parents too, so this base gets Beanie's query expressions as class
        # attributes (``VersionedDocument.id`` is ``ExpressionField("_id")``); pydantic, building a subclass made
        # after that, took them for the inherited fields' defaults, and a new instance was inserted with
        # ``_id: "_id"``. Nobody queries this base: they go before the subclass's fields are collected.
        for name, value in list(VersionedDocument.__dict__.items()):
            if isinstance(value, ExpressionField):
                delattr(VersionedDocument, name)
        super().__init_subclass__(**kwargs)
        shapes = cls.__dict__.get("shapes")
        if shapes is not None and (shapes.version_field, shapes.revision_field) != (VERSION_FIELD, REVISION_FIELD):
            raise ValueError(f"{cls.__name__}: VersionedDocument stores {VERSION_FIELD} and {REVISION_FIELD}; its shapes use other field names")

    async def insert(self, *, session: AsyncClientSession | None = None, **kwargs: Any) -> Self:
        """Insert at the current shape version, revision 1."""
        self._stamp()
        return await super().insert(session=session, **kwargs)

    @classmethod
    # Beanie's further options are passed through by keyword (type: ignore: mypy wants them positional too).
    async def insert_many(cls, documents: Any, session: AsyncClientSession | None = None, **kwargs: Any) -> Any:  # type: ignore[override]
        """``insert_many`` with every document stamped first."""
        documents = list(documents)
        for document in documents:
            document._stamp()
        return await super().insert_many(documents, session=session, **kwargs)

    @validate_self_before
    @wrap_with_actions(EventTypes.REPLACE)
    @save_state_after
    # Keyword-only on purpose (type: ignore): Beanie's positional ignore_revision has no meaning here, the revision always guards.
    async def replace(self, *, session: AsyncClientSession | None = None, bulk_writer: Any = None, **kwargs: Any) -> Self:  # type: ignore[override]
        """Replace the stored document, only at the revision this instance read."""
        _refuse_bulk(bulk_writer)
        if self.id is None:
            raise ValueError("a document needs an id to be replaced")
        await self._guarded_replace(session)
        return self

    @validate_self_before
    @wrap_with_actions(EventTypes.SAVE)
    @save_state_after
    # Keyword-only on purpose (type: ignore): Beanie's link_rule and ignore_revision have no meaning here.
    async def save(self, *, session: AsyncClientSession | None = None, **kwargs: Any) -> Self:  # type: ignore[override]
        """Insert a new document, or replace a stored one guarded by its revision.

        A document with an id but no revision that is not stored yet is inserted
        (Beanie's save is an upsert); one that was read is never silently re-created.
        """
        if self.id is None:
            return await self.insert(session=session)
        try:
            await self._guarded_replace(session)
        except RevisionConflictError as error:
            # read (even without a revision: a legacy document) and deleted since: never re-created
            if error.reason != "not_found" or self.revision is not None or self._stored or self._saved_state is not None:
                raise
            return await self.insert(session=session)
        return self

    @save_state_after
    async def update(self, *args: Any, session: AsyncClientSession | None = None, bulk_writer: Any = None, skip_actions: list[Any] | None = None,
        **kwargs: Any) -> Self:
        """A partial update (also behind ``set``, ``inc``, ``current_date``, ``save_changes``),
        guarded by the revision and bumping it; the instance gets the stored result."""
        _refuse_bulk(bulk_writer)
        if kwargs.pop("upsert", False):
            raise UnguardedWriteError("a versioned document is inserted with insert() or save(), not upserted by update()")
        for beanie_only in ("ignore_revision", "skip_sync"):  # Beanie's own switches: the integer revision always guards
            kwargs.pop(beanie_only, None)
        skip = skip_actions or []
        await ActionRegistry.run_actions(self, event_type=EventTypes.UPDATE, action_direction=ActionDirections.BEFORE, exclude=skip)
        query = self.find_one({"_id": self.id}).update(*args)
        stored = await find_one_and_update_with_revision(
            self.get_pymongo_collection(), {"_id": self.id}, query.update_query, expected_revision=self.revision or 0, session=session, **kwargs
        )
        merge_models(self, parse_obj(type(self), stored))
        await ActionRegistry.run_actions(self, event_type=EventTypes.UPDATE, action_direction=ActionDirections.AFTER, exclude=skip)
        return self

    def _save_state(self) -> None:
        """Beanie calls this on every document it parses from the server and after every write."""
        self._stored = True
        super()._save_state()

    def _stamp(self) -> None:
        """Revision 1, and the current version unless one was set: the fields may hold an older shape on purpose."""
        stamped = type(self).shapes.stamp({})
        if self.shape_version is None:
            self.shape_version = stamped[VERSION_FIELD]
        self.revision = stamped[REVISION_FIELD]

    async def _guarded_replace(self, session: AsyncClientSession | None) -> None:
        current = type(self).shapes.current
        if self.shape_version is not None and self.shape_version > current:
            # written by newer code: its fields are not this model's, and a replacement keeps only the model's
            raise ShapeVersionError("newer", f"document version {self.shape_version} is newer than this code's version {current}: replacing it would drop "
                "the fields this model does not know (deploy the newer code everywhere)", version=self.shape_version)
        # Built by this code, not read: it has read no revision (0) and no version, and its fields hold the current
        # shape unless it says otherwise. Unstamped, a legacy document it replaced at revision 0 kept no version,
        # and the steps from shape 0 later ran over the new fields.
        fresh = not self._stored and self.revision is None
        if fresh and self.shape_version is None:
            self.shape_version = current
        document = get_dict(self, to_db=True, keep_nulls=self.get_settings().keep_nulls)
        result = await replace_with_revision(
            self.get_pymongo_collection(), {"_id": self.id}, document, expected_revision=self.revision or 0,
            expected_version=None if fresh else self.shape_version or 0, session=session
        )
        self.revision = result.revision


def _refuse_bulk(bulk_writer: Any) -> None:
    if bulk_writer is not None:
        raise UnguardedWriteError("a bulk writer cannot report a revision conflict per document: write versioned documents one by one")
