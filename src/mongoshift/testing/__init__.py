"""Testing your own migrations with pytest: the ``mongoshift_*`` fixtures and their helpers.

Installing mongoshift registers :mod:`mongoshift.testing.plugin` with pytest (the ``pytest11``
entry point). The fixtures are lazy: a test suite that does not ask for one starts no server
and imports neither the driver nor the engine. See docs/testing.md.

The names below load on first use, so that pytest pays nothing for the plugin at start-up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .harness import MigrationHarness, assert_documents_at_version

__all__ = ["MigrationHarness", "assert_documents_at_version"]

_LAZY = {"MigrationHarness": ".harness", "assert_documents_at_version": ".harness"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
