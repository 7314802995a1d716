"""Document versioning for application code: the other half of background migrations.

Every document carries a shape version (``__v``; missing or null reads as 0) and
a revision (``__rev``) that every write increments. :func:`define_shapes` stamps
new documents and lifts old ones in memory; the ``*_with_revision`` helpers make
each write conditional on the revision that was read, so a background rewrite
or another writer is never overwritten silently. See docs/versioning.md.

Async helpers take a pymongo ``AsyncCollection``; the ``*_sync`` ones a ``Collection``.
This package imports nothing else from mongoshift, so applications can use it alone.
"""

from .errors import (
    InvalidRevisionError,
    RevisionConflictError,
    ShapeVersionError,
    UnguardedWriteError,
    VersioningError,
)
from .fields import REVISION_FIELD, VERSION_FIELD, revision_of
from .guard import RevisionResult
from .retry import Backoff, retry_on_conflict, retry_on_conflict_sync
from .revision import (
    bump_revision,
    find_one_and_update_with_revision,
    replace_with_revision,
    update_with_revision,
)
from .revision_sync import (
    bump_revision_sync,
    find_one_and_update_with_revision_sync,
    replace_with_revision_sync,
    update_with_revision_sync,
)
from .shapes import Shapes, Step, StepMigration, define_shapes

__all__ = [
    "REVISION_FIELD",
    "VERSION_FIELD",
    "Backoff",
    "InvalidRevisionError",
    "RevisionConflictError",
    "RevisionResult",
    "ShapeVersionError",
    "Shapes",
    "Step",
    "StepMigration",
    "UnguardedWriteError",
    "VersioningError",
    "bump_revision",
    "bump_revision_sync",
    "define_shapes",
    "find_one_and_update_with_revision",
    "find_one_and_update_with_revision_sync",
    "replace_with_revision",
    "replace_with_revision_sync",
    "retry_on_conflict",
    "retry_on_conflict_sync",
    "revision_of",
    "update_with_revision",
    "update_with_revision_sync",
]
