"""mongoshift: MongoDB schema and data migrations.

The commands are async functions in :mod:`mongoshift.runner.command`; settings
come from :func:`load_settings`; every failure is a :class:`MongoshiftError`
with a stable ``exit_code``.
"""

from .background.spec import Adaptive, Background, Partitions
from .config import Settings, load_settings
from .errors import ExitCode, MongoshiftError
from .runner.context import CancelSignal, MigrationContext

__version__ = "0.1.0"

__all__ = ["Adaptive", "Background", "CancelSignal", "Partitions", "ExitCode", "MigrationContext", "MongoshiftError", "Settings", "__version__", "load_settings"]
