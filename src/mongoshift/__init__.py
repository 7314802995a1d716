"""mongoshift: MongoDB schema and data migrations.

The Python API is :func:`connect` (a session: ``async with mongoshift.connect(settings) as ms``)
and :mod:`mongoshift.api` (the same calls as one-shot async functions, typed results);
settings come from :func:`load_settings`; every failure is a
:class:`MongoshiftError` with a stable ``exit_code``. What migration files
use (``Background`` and its ``Adaptive``, ``Partitions``, ``Transaction``, ``MigrationContext``,
``CancelSignal``) is here too.

The names below pydantic (settings, ``Background``...) load on first use, so that
``mongoshift --help`` does not pay for them (start-up time, see bench/cli.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import ExitCode, MongoshiftError

if TYPE_CHECKING:
    from .api.options import Lock
    from .api.session import Mongoshift, connect
    from .line.context import MigrationContext
    from .project.run import CancelSignal
    from .project.settings import Settings, load_settings
    from .schema.background import Adaptive, Background, Partitions, Transaction

__version__ = "0.1.0"

__all__ = [
    "Adaptive", "Background", "CancelSignal", "Lock", "Mongoshift", "Partitions", "ExitCode", "MigrationContext", "MongoshiftError",
    "Settings", "Transaction", "__version__", "connect", "load_settings",
]

#: Public name → the module that defines it, imported on first access.
_LAZY = {
    "CancelSignal": ".project.run",
    "Lock": ".api.options",
    "Mongoshift": ".api.session",
    "connect": ".api.session",
    "Settings": ".project.settings",
    "load_settings": ".project.settings",
    "MigrationContext": ".line.context",
    "Adaptive": ".schema.background",
    "Background": ".schema.background",
    "Partitions": ".schema.background",
    "Transaction": ".schema.background",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # once: later lookups do not come back here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
