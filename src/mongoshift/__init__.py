"""mongoshift: MongoDB schema and data migrations.

The Python API is :mod:`mongoshift.api` (async functions with typed results);
settings come from :func:`load_settings`; every failure is a
:class:`MongoshiftError` with a stable ``exit_code``. What migration files
use (``Background``, ``MigrationContext``, ``CancelSignal``) is here too.
"""

from .errors import ExitCode, MongoshiftError
from .project.run import CancelSignal
from .project.settings import Settings, load_settings
from .runner.context import MigrationContext
from .schema.background import Adaptive, Background, Partitions

__version__ = "0.1.0"

__all__ = ["Adaptive", "Background", "CancelSignal", "Partitions", "ExitCode", "MigrationContext", "MongoshiftError", "Settings", "__version__", "load_settings"]
