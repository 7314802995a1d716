"""A count as mongoshift prints it: ``1 document``, ``2 documents``, ``12,000 documents``.

Every human-readable line that counts something (the CLI, log lines, the dashboard through
``api.plural``) words it here, so none prints ``1 batches`` or hedges with ``document(s)``.
``--json`` carries the bare numbers and never goes through it. It imports nothing, so any
layer from ``project`` up may use it.
"""

from __future__ import annotations


def plural(n: int, noun: str, many: str | None = None) -> str:
    """``n`` with ``noun`` in the number it takes: singular for exactly 1, ``many`` (default
    ``noun + "s"``) otherwise, 0 included; thousands are grouped as the rest of the output does."""
    return f"{n:,} {noun if n == 1 else (many or noun + 's')}"
