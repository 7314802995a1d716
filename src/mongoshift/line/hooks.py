"""Lifecycle hooks from a module named in the config (``hooks = "migrations/_hooks.py"``).

The module may define any of ``before_all(ctx)``, ``after_all(ctx, summary)``,
``before_each(name, ctx, info)``, ``after_each(name, duration_ms, ctx, info)``
and ``on_error(name, error, ctx)``, sync or async. A hook that raises stops
the run with the hook-failed exit code, except ``on_error`` and ``after_all``
on a failed run, whose errors are logged and listed in the failure's
``later_errors`` so that the original failure is the one reported.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import ConfigInvalidError, HookFailedError
from ..project.redaction import describe_error
from ..project.user_code import run_source, source_module

HOOK_NAMES = ("before_all", "after_all", "before_each", "after_each", "on_error")


@dataclass
class Hooks:
    functions: dict[str, Callable[..., Any]]

    def get(self, name: str) -> Callable[..., Any] | None:
        return self.functions.get(name)


def load_hooks(spec: str | None) -> Hooks:
    if not spec:
        return Hooks({})
    module = _import(spec)
    found = {name: getattr(module, name) for name in HOOK_NAMES if callable(getattr(module, name, None))}
    return Hooks(found)


def _import(spec: str) -> ModuleType:
    try:
        if spec.endswith(".py"):
            path = Path(spec)
            if not path.is_file():
                raise ConfigInvalidError(f"setting 'hooks': file not found: {spec}")
            try:
                module = source_module("mongoshift_hooks", path)
            except ImportError:
                raise ConfigInvalidError(f"setting 'hooks': cannot import {spec}") from None
            run_source(module, path)
            return module
        return importlib.import_module(spec)
    except ConfigInvalidError:
        raise
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # a module may even call sys.exit while importing
        raise HookFailedError(f"hooks module {spec} failed to import: {describe_error(exc)}") from None
    finally:
        sys.modules.pop("mongoshift_hooks", None)
