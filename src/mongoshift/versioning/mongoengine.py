"""MongoEngine documents that keep the versioning contract: a signal stamps ``__v`` and
``__rev`` on insert, and every later ``save()`` or ``update()`` is guarded by the revision
that was read and bumps it.

Import this module only where MongoEngine is installed (``pip install
'mongoshift[mongoengine]'``, which brings blinker for the signals): ``import
mongoshift.versioning`` never imports MongoEngine. Writes go through
:func:`update_with_revision_sync`, so a conflict raises the same
:class:`RevisionConflictError` as hand-written code. What it does not cover is in docs/odm.md.
"""

from __future__ import annotations

from typing import Any, ClassVar

from mongoengine import Document, IntField, signals
from mongoengine.context_managers import set_write_concern
from mongoengine.queryset import QuerySet, transform

from .errors import RevisionConflictError, UnguardedWriteError
from .fields import REVISION_FIELD, VERSION_FIELD, corrupt
from .revision_sync import replace_with_revision_sync, update_with_revision_sync
from .shapes import Shapes


class _StoredNumber(IntField):
    """``__v`` / ``__rev``: an ``IntField`` whose refusal of a stored value that is no integer >= 0 names the
    value's type, never the value (``IntField`` says "<value> could not be converted to int")."""

    def validate(self, value: Any) -> None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            self.error(corrupt({self.db_field: value}, self.db_field))


class VersionedQuerySet(QuerySet):
    """Loads the revision whatever ``only()`` / ``exclude()`` say: a document read without it
    would be saved as revision 0 and conflict with itself, and a retry would never succeed."""

    def __init__(self, document: Any, collection: Any) -> None:
        super().__init__(document, collection)
        self._loaded_fields.always_include.add(REVISION_FIELD)


class VersionedDocument(Document):
    """An abstract MongoEngine ``Document`` whose writes keep ``__v`` and ``__rev``.

    Subclasses set ``shapes`` (from :func:`define_shapes`). A first ``save()`` inserts at
    ``shapes.current``, revision 1; a later one sends only the changed fields, and only
    while the stored revision is the one this instance holds. A miss raises
    :class:`RevisionConflictError`: reload and retry (``retry_on_conflict_sync``). The
    version is kept as read; code that lifts a document sets ``shape_version`` itself.
    """

    meta: ClassVar[dict[str, Any]] = {"abstract": True, "queryset_class": VersionedQuerySet}
    shapes: ClassVar[Shapes]

    shape_version = _StoredNumber(db_field=VERSION_FIELD, min_value=0, null=True)
    revision = _StoredNumber(db_field=REVISION_FIELD, min_value=0, null=True)

    def _save_create(self, doc: dict[str, Any], force_insert: bool, write_concern: dict[str, Any]) -> Any:
        """The insert half of ``save()``. A new instance given the ``_id`` of a stored document replaced that
        document unguarded (MongoEngine's ``find_one_and_replace``), its revision set back to 1; it now replaces
        it only at revision 0 (nobody wrote it since versioning, as the new instance has read nothing), and a
        document that is not stored is inserted."""
        if force_insert or "_id" not in doc:
            return super()._save_create(doc, force_insert, write_concern)
        where = self._integrate_shard_key(doc, {"_id": doc["_id"]})
        replacement = {k: v for k, v in doc.items() if k != REVISION_FIELD}  # stamped 1 on insert: the guard writes 0 + 1
        with set_write_concern(self._get_collection(), write_concern) as collection:
            try:
                replace_with_revision_sync(collection, where, replacement, expected_revision=0)
            except RevisionConflictError as error:
                if error.reason != "not_found":
                    raise
                return collection.insert_one(doc).inserted_id
        return doc["_id"]

    def _save_update(self, doc: dict[str, Any], save_condition: dict[str, Any] | None, write_concern: dict[str, Any]) -> tuple[Any, bool]:
        """The update half of ``save()``: the changed fields, guarded and bumping the revision.
        Never an upsert: a document that vanished is a conflict, not re-created."""
        update = self._get_update_doc()
        if not update:
            return doc["_id"], False  # nothing changed, nothing written
        where = transform.query(type(self), **save_condition) if save_condition else {}
        where["_id"] = doc["_id"]
        with set_write_concern(self._get_collection(), write_concern) as collection:
            result = update_with_revision_sync(collection, where, update, expected_revision=self.revision or 0)
        self._data["revision"] = result.revision  # not marked changed: the server holds it already
        return doc["_id"], False

    def update(self, **kwargs: Any) -> int:
        """``Document.update`` guarded by the revision this instance read; bumps it here too."""
        if self.pk is None:
            raise UnguardedWriteError("a versioned document is inserted with save(), not upserted by update()")
        if kwargs.pop("upsert", False):
            raise UnguardedWriteError("update(upsert=True) cannot be guarded by a revision")
        raw = transform.update(type(self), **kwargs)
        result = update_with_revision_sync(self._get_collection(), {"_id": self.pk}, raw, expected_revision=self.revision or 0)
        self._data["revision"] = result.revision
        return 1


def _stamp_on_insert(sender: Any, document: Any, created: bool = False, **_: Any) -> None:
    """``pre_save_post_validation``: a versioned document being inserted gets revision 1, and the current
    version unless one was set (its fields may hold an older shape on purpose)."""
    if created and isinstance(document, VersionedDocument):
        stamped = type(document).shapes.stamp({})
        if document.shape_version is None:
            document.shape_version = stamped[VERSION_FIELD]
        document.revision = stamped[REVISION_FIELD]


signals.pre_save_post_validation.connect(_stamp_on_insert)
