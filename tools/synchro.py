"""Writes the blocking twin of an async module, as PyMongo's own tools/synchro.py does.

``python tools/synchro.py`` regenerates every twin listed in ``TWINS``; ``--check`` exits 1
when a committed twin differs from what would be generated (the test suite runs the check,
so the two can never drift). Only the I/O differs between a helper and its twin, and the
rules below are the whole difference: ``async def f`` becomes ``def f_sync``, ``await``
goes, the async driver types become the sync ones, and references to a renamed function
follow it.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERSIONING = ROOT / "src" / "mongoshift" / "versioning"

#: async module -> (its twin, the twin's docstring)
TWINS: dict[Path, tuple[Path, str]] = {
    VERSIONING / "revision.py": (
        VERSIONING / "revision_sync.py",
        "The blocking twins of :mod:`.revision`, for a pymongo ``Collection``: same rules, names ending in ``_sync``.\n\n"
        "Generated from revision.py by tools/synchro.py: edit revision.py and run the tool, never this file.",
    ),
}

TYPES = {
    "pymongo.asynchronous.client_session": "pymongo.client_session",
    "pymongo.asynchronous.collection": "pymongo.collection",
    "AsyncClientSession": "ClientSession",
    "AsyncCollection": "Collection",
}


def synchronous(source: str, docstring: str) -> str:
    """The twin of ``source``: the async module's code with the sync I/O and ``docstring``."""
    body = source.split('"""', 2)[2]  # drop the module docstring
    public = [name for name in re.findall(r"^async def (\w+)\(", body, flags=re.M) if not name.startswith("_")]
    body = re.sub(r"^async def ", "def ", body, flags=re.M)
    body = re.sub(r"\bawait ", "", body)
    for old, new in TYPES.items():
        body = re.sub(rf"\b{re.escape(old)}\b", new, body)
    for name in public:
        body = re.sub(rf"\b{name}\b", f"{name}_sync", body)
    return f'"""{docstring}\n"""{body}'


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for source, (twin, docstring) in TWINS.items():
        text = synchronous(source.read_text(encoding="utf-8"), docstring)
        if twin.read_text(encoding="utf-8") == text:
            continue
        if check:
            stale.append(twin.relative_to(ROOT))
        else:
            twin.write_text(text, encoding="utf-8")
            print(f"wrote {twin.relative_to(ROOT)}")
    if stale:
        print(f"out of date (run python tools/synchro.py): {', '.join(map(str, stale))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
