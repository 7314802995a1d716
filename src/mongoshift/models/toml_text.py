"""Writing a declaration as a TOML file people read and edit: tables for the validator, one line per index.

The standard library reads TOML but does not write it. Only what declarations hold is
written: text, numbers, booleans, lists and tables. TOML has no null: a declaration that
holds one cannot be written and says where.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from ..errors import ModelsInvalidError

BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def key(name: str) -> str:
    return name if BARE_KEY.match(name) else json.dumps(name, ensure_ascii=False)


def value(item: Any, where: str) -> str:
    """One value inline (tables as ``{ a = 1 }``)."""
    if item is None:
        raise ModelsInvalidError(f"{where}: null cannot be written in TOML (the declaration file would lose it)")
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, int):
        return str(item)
    if isinstance(item, float):
        if math.isnan(item):
            return "nan"
        if math.isinf(item):
            return "inf" if item > 0 else "-inf"
        return repr(item)
    if isinstance(item, str):
        return json.dumps(item, ensure_ascii=False)
    if isinstance(item, Mapping):
        if not item:
            return "{}"
        return "{ " + ", ".join(f"{key(str(k))} = {value(v, f'{where}.{k}')}" for k, v in item.items()) + " }"
    if isinstance(item, (list, tuple)):
        return "[" + ", ".join(value(v, f"{where}[{i}]") for i, v in enumerate(item)) + "]"
    raise ModelsInvalidError(f"{where}: a {type(item).__name__} cannot be written in TOML")


def document(data: Mapping[str, Any], header: str) -> str:
    """The whole file: ``header`` as comments, plain keys, ``indexes`` one per line, then the tables."""
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    lines.append("")
    _table(data, [], lines)
    return "\n".join(lines).rstrip("\n") + "\n"


def _table(data: Mapping[str, Any], path: list[str], lines: list[str]) -> None:
    tables = [(k, v) for k, v in data.items() if isinstance(v, Mapping) and v]
    for name, item in data.items():
        if isinstance(item, Mapping) and item:
            continue
        where = ".".join([*path, name])
        if isinstance(item, (list, tuple)) and item and all(isinstance(v, Mapping) for v in item):
            lines.append(f"{key(name)} = [")
            lines.extend(f"  {value(v, f'{where}[{i}]')}," for i, v in enumerate(item))
            lines.append("]")
        else:
            lines.append(f"{key(name)} = {value(item, where)}")
    for name, item in tables:
        here = [*path, key(name)]
        if any(not (isinstance(v, Mapping) and v) for v in item.values()):  # a header only where it holds a value
            lines.append("")
            lines.append(f"[{'.'.join(here)}]")
        _table(item, here, lines)
