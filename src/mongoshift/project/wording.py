"""A count and a duration as mongoshift prints them: ``1 document``, ``12,000 documents``, ``0:12:50``.

Every human-readable line that counts something (the CLI, log lines, the dashboard through
``api.plural``) words it here, so none prints ``1 batches`` or hedges with ``document(s)``; every
duration shown beside a migration's progress (an ETA, the time elapsed) is a :func:`clock`, in the CLI
and on the dashboard alike. ``--json`` carries the bare numbers and never goes through it. It imports
nothing, so any layer from ``project`` up may use it.
"""

from __future__ import annotations


def plural(n: int, noun: str, many: str | None = None) -> str:
    """``n`` with ``noun`` in the number it takes: singular for exactly 1, ``many`` (default
    ``noun + "s"``) otherwise, 0 included; thousands are grouped as the rest of the output does."""
    return f"{n:,} {noun if n == 1 else (many or noun + 's')}"


def clock(seconds: float | None) -> str:
    """A duration (an ETA, the time elapsed) as ``H:MM:SS`` (``0:12:50``, ``27:03:00``), ``-`` when unknown: the one
    format of every background view, on a terminal, piped, in the progress lines and on the dashboard. A value that is
    no finite number (an ETA from a rate of 0) is unknown too, and a negative one (two clocks apart) is ``0:00:00``:
    ``int()`` raised on the first and the second read ``-1:59:55``."""
    if seconds is None or seconds != seconds or seconds in (float("inf"), float("-inf")):
        return "-"
    whole = max(int(seconds), 0)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def clipped(text: str, limit: int) -> str:
    """``text`` whole when it fits in ``limit`` characters, else cut at the last word that fits and ended with ``…``:
    a history entry's reason cut at a fixed length ended mid-word with nothing to say more was said."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    cut = head.rsplit(" ", 1)[0] if " " in head else head
    return cut.rstrip(" ,;:(") + "…"
