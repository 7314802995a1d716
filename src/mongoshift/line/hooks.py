"""Lifecycle hooks from a module named in the config (``hooks = "migrations/_hooks.py"``).

The module may define any of ``before_all(ctx)``, ``after_all(ctx, summary)``,
``before_each(name, ctx, info)``, ``after_each(name, duration_ms, ctx, info)``
and ``on_error(name, error, ctx)``, sync or async. A hook that raises stops
the run with the hook-failed exit code, except ``on_error`` and ``after_all``
on a failed run, whose errors are logged and listed in the failure's
``later_errors`` so that the original failure is the one reported.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import ConfigInvalidError, HookFailedError
from ..project.redaction import describe_error
from ..project.user_code import import_user_module, own_failure, run_source, source_module
from ..project.wording import plural

HOOK_NAMES = ("before_all", "after_all", "before_each", "after_each", "on_error")


@dataclass
class Hooks:
    functions: dict[str, Callable[..., Any]]

    def get(self, name: str) -> Callable[..., Any] | None:
        return self.functions.get(name)


#: How many positional arguments mongoshift passes each hook.
_ARGUMENTS = {"before_all": 1, "after_all": 2, "before_each": 3, "after_each": 4, "on_error": 3}


def load_hooks(spec: str | None) -> Hooks:
    """The hooks of the module ``spec`` names, each checked before anything runs: a hook that is not a
    function, or cannot take the arguments it is given, failed only when it was called (``after_each``:
    after its migration was applied and recorded, so the run stopped half way)."""
    if not spec:
        return Hooks({})
    module = _import(spec)
    # A hook name bound to something else (``before_all = None``, a typo'd import) would never run, silently.
    found = {name: getattr(module, name) for name in HOOK_NAMES if hasattr(module, name)}
    problems = [problem for name, fn in found.items() if (problem := _problem(name, fn))]
    if problems:
        raise HookFailedError(f"hooks module {spec}: {'; '.join(problems)}", problems=problems)
    return Hooks(found)


def _problem(name: str, fn: object) -> str | None:
    wanted = _ARGUMENTS[name]
    if not callable(fn):
        return f"{name} is {type(fn).__name__}, not a function"
    try:
        inspect.signature(fn).bind(*range(wanted))
    except TypeError:
        return f"{name} must take {plural(wanted, 'argument')}"
    except ValueError:  # a builtin without a signature: the call decides
        return None
    return None


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
        return import_user_module(spec)
    except ConfigInvalidError:
        raise
    except BaseException as exc:  # a module may raise anything while importing, even SystemExit
        if not own_failure(exc):
            raise
        problem = f"failed to import: {describe_error(exc)}"
        raise HookFailedError(f"hooks module {spec} {problem}", problems=[problem]) from None
    finally:
        sys.modules.pop("mongoshift_hooks", None)
