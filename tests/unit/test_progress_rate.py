"""The progress's rate and ETA come from the last minute of readings, not the average since the start.

The clock is injected: each reading is placed in time by the test, nothing sleeps.
"""

from __future__ import annotations

from mongoshift.background.inspect.status import BackgroundReport
from mongoshift.background.state.model import COUNTERS
from mongoshift.cli.progress import RATE_WINDOW_SECONDS, RecentRate, progress_line

NAME = "0001_names.py"
ESTIMATE = 10_000


def reading(scanned: int, *, status: str = "running", average: float = 17.0) -> BackgroundReport:
    """What ``background status`` returns, its own rate being the average since the start."""
    totals = dict.fromkeys(COUNTERS, 0) | {"scanned": scanned, "migrated": scanned}
    return BackgroundReport(
        name=NAME, status=status, direction="forward", collection="people", mode="document", pass_number=1, generation=1,
        partitions_total=4, partitions_open=4, partitions_done=0, partitions_failed=0, leases=2, totals=totals,
        failed_documents=0, estimate=ESTIMATE, remaining=ESTIMATE - scanned if status != "completed" else 0,
        rate_per_second=average, eta_seconds=(ESTIMATE - scanned) / average, elapsed_seconds=None, last_error=None,
        registered_at=None, started_at=None, completed_at=None,
    )


def test_a_run_slowed_down_by_the_throttle_shows_its_pace_now_not_its_average() -> None:
    clock = [0.0]
    recent = RecentRate(lambda: clock[0])
    lines = []
    # 100 docs/s for a minute, then the lanes crawl at 10 documents per 30 s (batch size 10, 30 s pauses).
    for at, scanned in ((0, 0), (60, 6_000), (90, 6_010), (120, 6_020), (150, 6_030)):
        clock[0] = float(at)
        report = reading(scanned)
        lines.append(progress_line(report, *recent.observe(report)))
    assert lines[0] == f"{NAME}: 0/10,000 documents (0%), -, ETA -, pass 1, running"  # one reading: nothing measured yet
    assert lines[1] == f"{NAME}: 6,000/10,000 documents (60%), 100 docs/s, ETA 0:00:40, pass 1, running"
    # Over the last minute (90 s to 150 s): 20 documents, 1/3 per second; 3,970 left take 3 h 18 min 30 s,
    # where the average since the start (6,030 in 150 s, 40 docs/s) would promise 99 s.
    assert lines[-1] == f"{NAME}: 6,030/10,000 documents (60%), 0.3 docs/s, ETA 3:18:30, pass 1, running"
    assert RATE_WINDOW_SECONDS == 60


def test_a_stall_reads_zero_with_no_eta_and_a_recount_starts_the_window_again() -> None:
    clock = [0.0]
    recent = RecentRate(lambda: clock[0])
    for at, scanned in ((0, 4_000), (30, 4_000), (90, 4_000)):
        clock[0] = float(at)
        rate, eta = recent.observe(reading(scanned))
    assert (rate, eta) == (0.0, None)
    assert progress_line(reading(4_000), rate, eta).endswith("0.0 docs/s, ETA -, pass 1, running")
    clock[0] = 120.0
    assert recent.observe(reading(50)) == (None, None)  # retry --from-start counted anew: no rate across it
    clock[0] = 150.0
    assert recent.observe(reading(350)) == (10.0, (ESTIMATE - 350) / 10.0)


def test_a_long_interval_measures_over_its_last_two_readings_and_a_completed_one_has_no_eta() -> None:
    clock = [0.0]
    recent = RecentRate(lambda: clock[0])
    recent.observe(reading(0))
    clock[0] = 3_600.0  # --progress-interval 3600: one reading an hour, more than the window
    assert recent.observe(reading(7_200)) == (2.0, (ESTIMATE - 7_200) / 2.0)
    clock[0] = 7_200.0
    rate, eta = recent.observe(reading(ESTIMATE, status="completed"))
    assert rate is not None and abs(rate - 2_800 / 3_600) < 1e-9 and eta is None


def test_two_readings_a_moment_apart_measure_nothing() -> None:
    """A run stopped by Ctrl-C right after a status reading: its last line (its own counters, a batch
    ahead of the checkpointed ones) came 20 ms later, and read as 75,000 docs/s with an ETA of zero."""
    clock = [0.0]
    recent = RecentRate(lambda: clock[0])
    recent.observe(reading(3_000))
    clock[0] = 0.02
    rate, eta = recent.observe(reading(4_500))
    assert (rate, eta) == (None, None)
    assert progress_line(reading(4_500), rate, eta).endswith("-, ETA -, pass 1, running")
    clock[0] = 2.0
    assert recent.observe(reading(5_000)) == (1_000.0, (ESTIMATE - 5_000) / 1_000.0)


def test_a_completed_migration_shows_what_it_scanned_not_the_plans_estimate() -> None:
    """The estimate is the plan's guess (10,000 here): once completed, the line and the table show the exact count."""
    from mongoshift.cli.background_view import progress

    done = reading(9_931, status="completed")
    assert progress_line(done, None, None).startswith(f"{NAME}: 9,931/9,931 documents (100%)")
    assert progress(done) == "9,931/9,931 (100%)"
    assert progress(reading(4_000)) == "4,000/10,000 (40%)"  # while it runs: the estimate, less what is left


def test_the_eta_has_one_format_piped_in_the_detail_and_in_the_progress_line(capsys) -> None:  # type: ignore[no-untyped-def]
    """Piped ``background status`` showed ``12m50s`` where the detail view and the progress lines showed ``0:12:50``."""
    import click

    from mongoshift.cli.background import _render_text
    from mongoshift.cli.background_view import details

    report = reading(ESTIMATE - 770, average=1.0)  # 770 documents left at 1 a second: 12 min 50 s
    with click.Context(click.Command("status")):
        _render_text([report], detail=False)
    piped = capsys.readouterr().out
    assert "\t0:12:50\t" in piped and "12m50s" not in piped, piped
    assert "ETA 0:12:50," in dict(details(report))["rate"]
    assert "ETA 0:12:50," in progress_line(report, 1.0, 770.0)
