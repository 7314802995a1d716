"""How ``background status`` (and the end of ``background run``) looks on a terminal of any width.

The list gives each migration two lines: its full name alone (never cut), then the figures
that say where it stands. ``background status NAME`` adds the detail: partitions, counters,
times, the last error, warnings and why documents failed. Everything wraps to the console's
width; 60 columns are enough.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from ..background.inspect.status import BackgroundReport, pace_words
from ..project.wording import clock, plural


def progress(r: BackgroundReport) -> str:
    done, total = done_of(r)
    if not total:
        return f"{done:,} scanned"
    return f"{done:,}/{total:,} ({min(100, done * 100 // total)}%)"


def done_of(r: BackgroundReport) -> tuple[int, int]:
    """Documents done and the total they count towards (:meth:`BackgroundReport.progress`)."""
    return r.progress()


def rate(r: BackgroundReport) -> str:
    return f"{r.rate_per_second:,.0f} docs/s" if r.rate_per_second else "-"


def summary(r: BackgroundReport) -> str:
    """The figures of the list's second line."""
    parts = [
        r.status if r.direction == "forward" else f"{r.status} (revert)",
        f"pass {r.pass_number}",
        progress(r),
        f"{r.totals['migrated']:,} migrated",
    ]
    if r.failed_documents:
        parts.append(f"{r.failed_documents:,} failed")
    if r.status in ("pending", "running"):
        parts += [rate(r), f"ETA {clock(r.eta_seconds)}"]
    return " · ".join(parts)


def _line(console: Console, text: str, *, indent: int = 0, style: str | None = None) -> None:
    """Wrapped to the console's width (continuation lines keep the indent); a word longer than a
    line (a long name) folds onto the next one, never cut."""
    body = Text(text, style=style or "", overflow="fold")
    console.print(Padding(body, (0, 0, 0, indent), expand=False) if indent else body, soft_wrap=False, width=console.width)


def render_list(console: Console, reports: Sequence[BackgroundReport]) -> None:
    for r in reports:
        _line(console, r.name, style="bold")
        _line(console, summary(r), indent=2)
        if r.last_error and r.status == "failed":
            _line(console, f"last error: {_cut(r.last_error, 300)}", indent=2)
        for warning in r.warnings:
            _line(console, f"warning: {warning}", indent=2, style="yellow")
    if any(r.failed_documents or r.status == "failed" for r in reports):
        _line(console, "'mongoshift background status NAME' shows the details and why documents failed", style="dim")


def throttle_words(throttle: dict[str, int]) -> str:
    """The operator's pace (``background throttle``), which the lanes take over the file's and the adaptive size."""
    said = [
        f"batch size {throttle['batch_size']:,}" if "batch_size" in throttle else "",
        f"pause {throttle['pause_ms']:,} ms" if "pause_ms" in throttle else "",
    ]
    return f"{', '.join(w for w in said if w)} (set by 'background throttle': the lanes take it over the file's pace)"


def details(r: BackgroundReport) -> list[tuple[str, str]]:
    """The detail view as (label, value) pairs: a grid on a terminal, ``label<TAB>value`` lines when piped."""
    t = r.totals
    rows = [
        ("status", f"{r.status}, {r.direction}, pass {r.pass_number}, generation {r.generation}"),
        ("collection", f"{r.collection} ({r.mode})"),
        ("progress", f"{progress(r)}, {r.remaining:,} remaining" if r.estimate else progress(r)),
        ("documents", f"{t['migrated']:,} migrated, {t['scanned']:,} scanned, {t['skipped']:,} skipped, {r.failed_documents:,} failed"),
        ("writes", f"{plural(t['conflicts'], 'conflict')}, {t['retried']:,} retried, {plural(t['batches'], 'batch', 'batches')}, "
                   f"{plural(t['txn_retries'], 'transaction retry', 'transaction retries')}"),
        ("partitions", f"{r.partitions_done} done of {r.partitions_total}, {r.partitions_open} open, {r.partitions_failed} failed, {r.leases} leased"),
        ("rate", f"{rate(r)}, ETA {clock(r.eta_seconds)}, elapsed {clock(r.elapsed_seconds)}"),
        *(("batch size", line) for line in pace_words(r.batch_size, (r.throttle or {}).get("batch_size"))),
        *((("throttle", throttle_words(r.throttle)),) if r.throttle else ()),
        ("registered", _when(r.registered_at)),
        ("started", _when(r.started_at)),
        ("completed", _when(r.completed_at)),
    ]
    if r.waits_for:
        rows.append(("waits for", ", ".join(r.waits_for)))
    if r.last_error:
        rows.append(("last error", _cut(r.last_error, 1000)))
    rows += [("warning", w) for w in r.warnings]
    return rows


def error_rows(r: BackgroundReport) -> list[tuple[str, ...]]:
    return [(f"{c['count']:,}", c["reason"], _cause(c)) for c in r.doc_error_counts]


def recent_rows(r: BackgroundReport) -> list[tuple[str, ...]]:
    """The kept reasons, identical ones once: (last seen, times, reason, class / code, message), newest first."""
    seen: dict[tuple[str, str, str], list[Any]] = {}
    for e in r.doc_errors:  # oldest first
        key = (e["reason"], _cause(e), e["error"])
        entry = seen.setdefault(key, [None, 0])
        entry[0], entry[1] = e.get("at"), entry[1] + int(e.get("times", 1))
    # By the time itself, not its text: the text shows whole seconds, and the messages of one second
    # would keep their oldest-first order under a "newest first" heading.
    newest = sorted(seen.items(), key=lambda item: _sort_time(item[1][0]), reverse=True)
    return [(_when(at), str(n), *key) for key, (at, n) in newest]


def _sort_time(value: Any) -> float:
    return value.timestamp() if isinstance(value, datetime) else float("-inf")


def render_detail(console: Console, r: BackgroundReport) -> None:
    _line(console, r.name, style="bold")
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True, style="dim")
    grid.add_column(overflow="fold")
    for label, value in details(r):
        grid.add_row(label, escape(value))
    console.print(grid, width=console.width)
    if not r.doc_error_counts:
        return
    _line(console, "")
    _line(console, f"failed documents: {r.failed_documents:,} (their ids are not shown)", style="bold")
    console.print(_table(["count", "reason", "class / code"], error_rows(r)), width=console.width)
    if r.doc_errors:
        newest = "" if len(r.doc_errors) == 1 else ", newest first"
        _line(console, f"the {plural(len(r.doc_errors), 'most recent message')}{newest}:", style="bold")
        for at, times, reason, cause, message in recent_rows(r):
            _line(console, f"{cause} ({reason}), {times}×, last at {at}", indent=2)
            _line(console, message, indent=4)


def _table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> Table:
    table = Table(*columns)
    for column in table.columns:
        column.overflow = "fold"
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    return table


def _cause(entry: dict[str, Any]) -> str:
    if entry.get("error_class"):
        return str(entry["error_class"])
    return f"code {entry['code']}" if entry.get("code") is not None else "-"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _when(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if isinstance(value, datetime) else "-"
