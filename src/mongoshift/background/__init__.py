"""Background migrations: rewriting every document of a collection while the application runs.

``up`` only registers a background migration; lanes in any number of
processes then claim partitions under leases and rewrite them batch by batch
(:mod:`.write.batch` is the one write path), moving a fenced checkpoint after each
batch, pass after pass until nothing of the old shape is left.

Sub-packages by role, each importing only those below it (the ``background-layers``
contract): ``steps`` (the one module the migration line calls) > ``watch`` > ``lanes`` |
``registry`` > ``inspect`` > ``write`` > ``plan`` > ``state``.
"""

from ..schema.background import Adaptive, Background, Partitions, Transaction

__all__ = ["Adaptive", "Background", "Partitions", "Transaction"]
