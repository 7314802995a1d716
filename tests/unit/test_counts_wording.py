"""Counts in human-readable lines: ``1 document``, ``0 documents``, ``2 documents``, never ``1 batches``
or ``document(s)``, in the main messages (status, the line's stop, tenants, converge, background status,
run and dry-run). ``--json`` keeps the bare numbers and is not worded."""

from __future__ import annotations

import logging
import re

import pytest

from mongoshift.background.inspect.preview import Preview, PreviewRow
from mongoshift.background.inspect.status import BackgroundReport
from mongoshift.background.state.events import Events, describe_drift, describe_throttle
from mongoshift.background.state.model import COUNTERS
from mongoshift.cli.background import run_verdict
from mongoshift.cli.background_view import details, render_detail
from mongoshift.cli.preview_view import heading
from mongoshift.cli.progress import progress_line
from mongoshift.line.plan import StatusRow, status_verdict
from mongoshift.project.wording import plural
from mongoshift.tenants.report import RolloutReport, TenantRow

HEDGE = re.compile(r"\((s|es)\)")
#: A count of 1 followed by a plural noun: "1 documents", "1 batches", "1 migrations".
ONE_PLURAL = re.compile(r"(?<![\d,.])1 (?:[a-z.-]+ )?(documents|batches|migrations|files|changes|overloads|conflicts|partitions|leases|tenants|"
                        r"collections|items|retries|results|lanes|slices|passes|warnings|findings|records|operations|calls)\b")


def clean(text: str) -> str:
    assert not HEDGE.search(text), text
    assert not ONE_PLURAL.search(text), text
    return text


@pytest.mark.parametrize(
    ("n", "noun", "many", "said"),
    [
        (0, "document", None, "0 documents"),
        (1, "document", None, "1 document"),
        (2, "document", None, "2 documents"),
        (1, "batch", "batches", "1 batch"),
        (2, "batch", "batches", "2 batches"),
        (12_000, "document", None, "12,000 documents"),
        (-1, "document", None, "-1 documents"),
    ],
)
def test_plural(n: int, noun: str, many: str | None, said: str) -> None:
    assert plural(n, noun, many) == said


def _row(name: str, state: str) -> StatusRow:
    return StatusRow(name, state)  # type: ignore[arg-type]


@pytest.mark.parametrize(("pending", "said"), [(1, "1 migration pending"), (2, "2 migrations pending")])
def test_status_check(pending: int, said: str) -> None:
    rows = [_row("0001_a.py", "applied")] + [_row(f"000{i + 2}_b.py", "pending") for i in range(pending)]
    verdict = status_verdict(rows)
    assert verdict is not None and clean(verdict[1]) == said
    assert status_verdict([_row("0001_a.py", "applied")]) is None  # 0 pending: nothing to say


def test_status_check_names_the_failed_migrations_among_the_pending() -> None:
    """A failed migration counts as pending (exit 2), and 'status --check' said only "3 migrations pending": CI's
    log did not say that one of them had failed, nor which (the table's summary says "(1 failed)")."""
    rows = [_row("0001_a.py", "applied"), _row("0002_b.py", "failed"), _row("0003_c.py", "pending"), _row("0004_d.py", "pending")]
    verdict = status_verdict(rows)
    assert verdict is not None and clean(verdict[1]) == "3 migrations pending (1 failed: 0002_b.py)"


@pytest.mark.parametrize(("tenants", "said"), [(0, "0 tenants: "), (1, "1 tenant: 1 done"), (2, "2 tenants: 2 done")])
def test_tenants_summary(tenants: int, said: str) -> None:
    for command in ("up", "down"):
        report = RolloutReport(command, [TenantRow(f"t{i}", "done", applied=1) for i in range(tenants)])
        assert clean(report.summary()) == said


def _report(*, scanned: int, estimate: int, status: str = "running", failed: int = 0, batches: int = 0) -> BackgroundReport:
    totals = dict.fromkeys(COUNTERS, 0) | {"scanned": scanned, "migrated": scanned, "batches": batches, "conflicts": batches, "txn_retries": batches}
    return BackgroundReport(
        name="0001_names.py", status=status, direction="forward", collection="people", mode="document", pass_number=1, generation=1,
        partitions_total=1, partitions_open=1, partitions_done=0, partitions_failed=0, leases=1, totals=totals,
        failed_documents=failed, estimate=estimate, remaining=estimate - scanned, rate_per_second=None, eta_seconds=None,
        elapsed_seconds=None, last_error=None, registered_at=None, started_at=None, completed_at=None,
    )


@pytest.mark.parametrize(
    ("n", "progress", "writes", "left"),
    [
        (0, "0/? documents", "0 conflicts, 0 retried, 0 batches, 0 transaction retries", None),
        (1, "0/1 document", "1 conflict, 0 retried, 1 batch, 1 transaction retry", "about 1 document left"),
        (2, "0/2 documents", "2 conflicts, 0 retried, 2 batches, 2 transaction retries", "about 2 documents left"),
    ],
)
def test_background_status_and_run(n: int, progress: str, writes: str, left: str | None) -> None:
    report = _report(scanned=0, estimate=n, batches=n)
    assert clean(progress_line(report, None, None)).startswith(f"0001_names.py: {progress} (")
    assert clean(dict(details(report))["writes"]) == writes
    error = run_verdict([report], once=True)
    assert error is not None
    message = clean(str(error))
    assert (left in message) if left else ("document" not in message)


def test_background_status_detail_names_the_recent_messages_in_their_number() -> None:
    from rich.console import Console

    for kept, said in ((1, "the 1 most recent message:"), (2, "the 2 most recent messages, newest first:")):
        report = _report(scanned=2, estimate=2, status="completed", failed=kept)
        report.doc_error_counts = [{"reason": "transform", "error_class": "ValueError", "code": None, "count": kept}]
        report.doc_errors = [{"reason": "transform", "error_class": "ValueError", "error": f"bad {i}", "at": None} for i in range(kept)]
        console = Console(width=200, record=True)
        render_detail(console, report)
        text = console.export_text()
        assert said in text and clean(text)


def test_background_status_lists_the_recent_messages_newest_first_within_one_second() -> None:
    """The table shows whole seconds; its order is by the time itself (three messages of one second
    were listed oldest first under "newest first", between the other seconds' newest-first rows)."""
    from datetime import UTC, datetime, timedelta

    from mongoshift.cli.background_view import recent_rows

    start = datetime(2026, 12, 5, 17, 25, 57, 100_000, tzinfo=UTC)
    report = _report(scanned=4, estimate=4, status="completed", failed=4)
    report.doc_errors = [  # oldest first, as stored
        {"reason": "transform", "error_class": "ValueError", "error": f"bad {i}", "at": start + timedelta(milliseconds=300 * i)} for i in range(4)
    ]
    assert [row[-1] for row in recent_rows(report)] == ["bad 3", "bad 2", "bad 1", "bad 0"]


@pytest.mark.parametrize(("found", "said"), [(0, "0 documents (first by _id"), (1, "1 document (first by _id"), (2, "2 documents (first by _id")])
def test_background_dry_run(found: int, said: str) -> None:
    preview = Preview("0001_names.py", "people", "forward", 0, 1, "first", 5, rows=[PreviewRow(i, {"_id": i}) for i in range(found)])
    assert said in clean(heading(preview))
    preview.validated = True
    assert said in clean(heading(preview)) and "0 operations refused" in heading(preview)


@pytest.mark.parametrize("n", [0, 1, 2])
def test_background_event_lines(n: int, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mongoshift")
    counts = {"scanned": n, "migrated": n, "skipped": 0, "conflicts": 0, "failed": 0, "retried": n, "batches": n, "txn_retries": n}
    for kind, data in (
        ("partitioned", {"partitions": n, "estimate": n}),
        ("pass", {"number": 2, "remaining": n}),
        ("reclaimed", {"leases": n}),
        ("completed", {"failed_documents": n, **counts}),
    ):
        Events([]).emit(kind, "0001_x.py", **data)
    lines = [clean(r.getMessage()) for r in caplog.records]
    word = {0: "documents", 1: "document", 2: "documents"}[n]
    if n == 0:  # a pass planned over nothing says so, not "cut into 0 partitions over about 0 documents"
        assert "nothing to rewrite" in lines[0] and "0 partition" not in lines[0]
    else:
        assert f"about {n} {word}" in lines[0] and f"{n} partition" in lines[0]
    assert f"in {n} {'batch' if n == 1 else 'batches'};" in lines[3]
    assert ("transaction" not in lines[3]) if n == 0 else f"{n} {'transaction retry' if n == 1 else 'transaction retries'}" in lines[3]
    for action in ("upgraded", "failed", "reopened", "reported"):
        clean(describe_drift({"collection": "people", "action": action, "documents": n}))
    clean(describe_drift({"collection": "people", "action": "reported", "stranded": True, "documents": n}))
    assert clean(describe_throttle({"change": "slow", "changes": n, "overloads": n})).endswith(
        f"{plural(n, 'change')} since the last report, {plural(n, 'overload')}"
    )


@pytest.mark.parametrize(
    ("found", "stranded", "action", "label"),
    [
        (True, False, "reported", "drift: reported"),
        (True, False, "reopened", "drift: reopened"),
        (False, True, "reported", "stranded: reported"),
        (True, True, "reopened", "drift: reopened; stranded: reported"),
    ],
)
def test_a_verify_row_is_labelled_by_what_was_found(found: bool, stranded: bool, action: str, label: str) -> None:
    """A row with only stranded documents said "drift: reported", though no old shape (no drift) was found."""
    from mongoshift.background.inspect.drift import Verified
    from mongoshift.cli.background import _verdict

    result, _ = _verdict(Verified("0001_names.py", "people", found, action, stranded=stranded))  # type: ignore[arg-type]
    assert result == label


def test_a_duration_that_is_not_a_time_is_unknown_and_a_negative_one_is_none() -> None:
    """``api.clock``: NaN and infinity (an ETA from a rate of 0) raised ValueError, and -5 (two clocks apart) read
    ``-1:59:55`` (stop 57, h5)."""
    from mongoshift import api

    assert [api.clock(s) for s in (None, float("nan"), float("inf"), float("-inf"))] == ["-"] * 4
    assert [api.clock(s) for s in (-5, -0.5, 0, 59.9, 3_700, 97_380)] == ["0:00:00", "0:00:00", "0:00:00", "0:00:59", "1:01:40", "27:03:00"]
