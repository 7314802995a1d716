"""What the templates show, computed from a snapshot: numbers and words only, never a document value.

The throughput chart is server-rendered SVG (no chart library, nothing to run in the browser), so
it is there with JavaScript off and in a screenshot.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

from bson import json_util

from .. import api

#: The chart's drawing box, in SVG units.
CHART_W, CHART_H, PAD = 640, 180, 36


@dataclass(frozen=True)
class Chart:
    """A throughput chart: the SVG's polyline points and its labels."""

    points: str
    peak: float
    first: str
    last: str
    buckets: int

    @property
    def empty(self) -> bool:
        return self.buckets == 0


#: How long one sample bucket is (``BackgroundStore.SAMPLE_BUCKET_SECONDS``, the API's documented 10 s):
#: a bucket holds the documents of the 10 wall-clock seconds from its ``at``.
BUCKET_SECONDS = 10.0


def chart(
    samples: list[dict[str, Any]], *, counter: str = "scanned", started: datetime | None = None, stopped: datetime | None = None
) -> Chart:
    """Documents per second in each sample bucket, as polyline points (a gap between buckets is a zero).

    A bucket's rate is its count divided by the time of it the run covered: from the later of the
    bucket's start and ``started`` to the earlier of its end and ``stopped`` (when the run stopped, or
    now for one still running). A run of 0.75 s in one bucket is its count over 0.75 s, not over 10 s;
    a bucket the run covered none of (an earlier run's, before a retry's new start) counts whole."""
    if not samples:
        return Chart("", 0.0, "", "", 0)
    start: datetime = samples[0]["at"]
    end: datetime = samples[-1]["at"]
    span = max(1.0, (end - start).total_seconds())
    rates = [(row["at"], row.get(counter, 0) / _covered(row["at"], started, stopped)) for row in samples]
    peak = max(rate for _, rate in rates) or 1.0
    rates = _with_gaps(rates)
    width, height = CHART_W - 2 * PAD, CHART_H - 2 * PAD
    points = []
    for at, rate in rates:
        y = PAD + height - (rate / peak) * height
        if len(rates) == 1:  # one bucket: a level line across the box (a single point draws nothing)
            points += [f"{PAD:.1f},{y:.1f}", f"{PAD + width:.1f},{y:.1f}"]
            break
        x = PAD + ((at - start).total_seconds() / span) * width
        points.append(f"{x:.1f},{y:.1f}")
    return Chart(" ".join(points), round(peak, 1), when(start), when(end)[-8:], len(samples))


def _with_gaps(rates: list[tuple[datetime, float]]) -> list[tuple[datetime, float]]:
    """``rates`` with a zero at each end of a stretch of buckets that recorded nothing (between a completed pass
    and a retry's, while paused): a line drawn straight from one bucket to the next said it worked meanwhile."""
    step = timedelta(seconds=BUCKET_SECONDS)
    out = rates[:1]
    for (before, _), (at, rate) in pairwise(rates):
        if at - before > step:
            out.append((before + step, 0.0))
            if at - step > before + step:
                out.append((at - step, 0.0))
        out.append((at, rate))
    return out


def _covered(at: datetime, started: datetime | None, stopped: datetime | None) -> float:
    """The seconds of the bucket from ``at`` that lie between ``started`` and ``stopped`` (either may be unknown)."""
    begin, end = at, at + timedelta(seconds=BUCKET_SECONDS)
    if started is not None:
        begin = max(begin, _utc(started))
    if stopped is not None:
        end = min(end, _utc(stopped))
    seconds = (end - begin).total_seconds()
    return seconds if seconds > 0 else BUCKET_SECONDS


def _utc(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def percent(report: api.BackgroundReport) -> int:
    """How far a migration is, 0-100, as its progress (:meth:`~mongoshift.api.BackgroundReport.progress`) says: this
    pass's documents done of its estimate (a completed one is 100 whatever its estimate said)."""
    if report.status == "completed":
        return 100
    done, total = report.progress()
    if total <= 0:
        return 0
    return max(0, min(100, round(100 * done / total)))


def verdicts(audit: api.AuditReport | None) -> dict[str, str]:
    """The audit's worst severity per subject (a migration's name, or ``lock``)."""
    out: dict[str, str] = {}
    if audit is None:
        return out
    rank = {"ok": 0, "warn": 1, "fail": 2}
    for finding in audit.findings:
        if rank.get(finding.severity, 0) >= rank.get(out.get(finding.subject, "ok"), 0):
            out[finding.subject] = finding.severity
    return out


def line_counts(rows: list[api.StatusRow]) -> dict[str, int]:
    """How many files are in each state of the migration line (applied, pending, failed, ...)."""
    return dict(Counter(row.state for row in rows))


def count(n: float | None, digits: int = 1) -> str:
    """A count grouped by thousands, as every other output of mongoshift (``plural`` too): ``1,500``; a rate with
    ``digits`` decimals (``2,350.5``); ``-`` when unknown, as ``clock`` says an unknown time beside it (and the CLI
    an unknown rate): a row read ``–`` docs/s then ``-`` left, two different dashes for the same "not known"."""
    if n is None:
        return "-"
    return f"{n:,}" if isinstance(n, int) else f"{n:,.{digits}f}"


def shown_id(value: Any) -> str:
    """A failed document's ``_id`` as relaxed Extended JSON, the form a filter takes it in (``find({"_id": ...})``): the
    number ``5`` and the text ``"5"`` differ, and an ``ObjectId`` or a date says what it is (``str`` showed ``5`` for
    both, and a date as ``2020-02-12 00:00:00``)."""
    return json_util.dumps(value, json_options=json_util.RELAXED_JSON_OPTIONS)


def when(at: datetime | None) -> str:
    """A time as the pages show it, in UTC (as they say): a zone-aware one (an application's client made with
    ``tz_aware=True, tzinfo=...`` reads every stored time in its zone) is converted; a naive one is UTC already."""
    return _utc(at).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if at else "–"


#: How many tenants behind (and how many failed) the overview names; the others are counted only,
#: so a project of thousands of tenants gives a page of the same size.
TENANTS_NAMED = 20

#: A tenant's state on the overview, in the order the counts are shown.
TENANT_STATES = ("up to date", "behind", "failed")


@dataclass(frozen=True)
class TenantNote:
    """One tenant named on the overview: its name and why it is there (file names, an error's kind; never a value)."""

    name: str
    why: str


@dataclass(frozen=True)
class TenantsSummary:
    """How many tenants are at each state, and the first few behind or failed by name (bounded for any count)."""

    total: int
    counts: dict[str, int]
    behind: list[TenantNote]
    failed: list[TenantNote]

    @property
    def more_behind(self) -> int:
        return self.counts["behind"] - len(self.behind)

    @property
    def more_failed(self) -> int:
        return self.counts["failed"] - len(self.failed)


def tenant_state(row: api.TenantRow) -> tuple[str, str]:
    """A tenant's state from its ``status`` row, and why: ``failed`` (its status could not be read, a file
    failed or is missing, a background migration failed), ``behind`` (files pending, a background migration
    not completed) or ``up to date``."""
    if not row.ok:
        return "failed", f"status not read ({row.error.kind})" if row.error else f"status {row.outcome}"
    rows: list[api.StatusRow] = row.result if isinstance(row.result, list) else []
    # each with what went wrong: a bare name could be a file that failed, one gone from the folder or a background migration
    failed = [
        f"{r.name} {'missing' if r.state == 'missing' else 'failed' if r.state == 'failed' else '(background) failed'}"
        for r in rows if r.state in ("failed", "missing") or r.background == "failed"
    ]
    if failed:
        return "failed", _files(failed)
    behind = [r.name for r in rows if r.pending or r.background not in (None, "completed")]
    if behind:
        return "behind", f"{len(behind)} to go: {_files(behind)}"
    return "up to date", ""


def summarise_tenants(report: api.RolloutReport, *, named: int = TENANTS_NAMED) -> TenantsSummary:
    """The overview's tenants view of one ``status`` across tenants (the per-tenant rows are not kept)."""
    counts = dict.fromkeys(TENANT_STATES, 0)
    noted: dict[str, list[TenantNote]] = {"behind": [], "failed": []}
    for row in report.rows:
        state, why = tenant_state(row)
        counts[state] += 1
        if state in noted and len(noted[state]) < named:
            noted[state].append(TenantNote(row.name, why))
    return TenantsSummary(len(report.rows), counts, noted["behind"], noted["failed"])


def _files(names: list[str], shown: int = 3) -> str:
    listed = ", ".join(names[:shown])
    return listed + (f" +{len(names) - shown}" if len(names) > shown else "")


def watcher_of(watchers: list[api.WatchRecord], report: api.BackgroundReport | None) -> api.WatchRecord | None:
    """The live watcher of the migration's collection, if one ever ran there."""
    if report is None:
        return None
    return next((w for w in watchers if w.collection == report.collection), None)

