"""Declared collections and ``mongoshift converge``.

One role per module: ``declaration`` (what the project declares, and loading
it), ``spec`` (the comparable form of an index or validator), ``inspection``
(what the server has), ``planner`` (the difference, as typed actions; pure),
``applier`` (making it, in a fixed order), ``journal`` (the converge log) and
``command`` (the API the CLI and ``up --converge`` call).

Names are imported lazily: :mod:`mongoshift.config` imports the declaration
models, and the command module imports the config.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "CollectionDeclaration": "declaration",
    "IndexDeclaration": "declaration",
    "Versioning": "declaration",
    "declaration_for": "declaration",
    "load_declarations": "declaration",
    "Action": "planner",
    "ConvergeReport": "command",
    "converge": "command",
    "plan_converge": "command",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mongoshift.converge' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{module}"), name)
