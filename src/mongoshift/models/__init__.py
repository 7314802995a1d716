"""Collection declarations and migration skeletons derived from the application's models.

Beanie ``Document`` classes, MongoEngine documents and plain Pydantic models registered with
:func:`collection` are read into the declared collections that ``converge`` applies
(``mongoshift collections generate``), and a change of their shape between two snapshots
into a background migration (``mongoshift create --from-models``). See docs/models.md.

Importing this package loads only :mod:`.registry`, so an application module may use
:func:`collection` without loading the readers.
"""

from __future__ import annotations

from .registry import Registration, collection

__all__ = ["Registration", "collection"]
