"""The numbers the pages show, computed without a server: the SVG chart's points, progress."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from mongoshift.dashboard import views


def test_the_chart_scales_documents_per_second_into_its_box() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    samples = [{"at": t0, "scanned": 100}, {"at": t0 + timedelta(seconds=10), "scanned": 400}, {"at": t0 + timedelta(seconds=20), "scanned": 0}]
    chart = views.chart(samples)
    points = [tuple(map(float, p.split(","))) for p in chart.points.split()]
    assert chart.peak == 40.0 and chart.buckets == 3
    assert points[0][0] == views.PAD and points[-1][0] == views.CHART_W - views.PAD  # first and last bucket at the box's edges
    assert points[1][1] == views.PAD  # the peak at the top
    assert points[2][1] == views.CHART_H - views.PAD  # zero at the bottom


def test_a_buckets_rate_is_over_the_time_the_run_covered_of_it() -> None:
    """A run of 0.75 s inside one bucket is its count over 0.75 s; a run's first and last buckets count
    from its start and to its stop; the buckets between count 10 s; no run window: every bucket 10 s."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    short = views.chart([{"at": t0, "scanned": 3025}], started=t0 + timedelta(seconds=3.2), stopped=t0 + timedelta(seconds=3.95))
    assert short.peak == 4033.3
    samples = [{"at": t0 + timedelta(seconds=s), "scanned": n} for s, n in ((0, 20), (10, 100), (20, 40))]
    longer = views.chart(samples, started=t0 + timedelta(seconds=8), stopped=t0 + timedelta(seconds=24))
    heights = [float(p.split(",")[1]) for p in longer.points.split()]
    assert longer.peak == 10.0 and heights[0] == heights[1] == heights[2] == views.PAD  # 20 over 2 s, 100 over 10 s, 40 over 4 s
    assert views.chart(samples).peak == 10.0  # 100 over the bucket's 10 s


def test_one_bucket_draws_a_level_line_and_none_draws_nothing() -> None:
    chart = views.chart([{"at": datetime(2026, 1, 1, tzinfo=UTC), "scanned": 50}])
    assert len(chart.points.split()) == 2 and not chart.empty
    assert views.chart([]).empty


def test_the_tenants_view_counts_every_tenant_and_names_only_a_few() -> None:
    """A thousand tenants: every one counted, at most ``TENANTS_NAMED`` behind and failed named, the rest summed."""
    from mongoshift.api import RolloutReport, StatusRow, TenantError, TenantRow

    def row(i: int) -> TenantRow:
        if i % 10 == 0:  # 100 whose status could not be read
            return TenantRow(f"t{i}", "failed", error=TenantError("connection_failed", 5, "unreachable"))
        if i % 10 == 1:  # 100 with a failed file
            return TenantRow(f"t{i}", "done", result=[StatusRow("0001_a.py", "applied"), StatusRow("0002_b.py", "failed")])
        if i % 10 in (2, 3):  # 200 with a file pending or a background migration not completed
            pending = StatusRow("0002_b.py", "pending") if i % 10 == 2 else StatusRow("0002_b.py", "applied", background="running")
            return TenantRow(f"t{i}", "done", result=[StatusRow("0001_a.py", "applied"), pending])
        return TenantRow(f"t{i}", "done", result=[StatusRow("0001_a.py", "applied"), StatusRow("0002_b.py", "applied", background="completed")])

    summary = views.summarise_tenants(RolloutReport("status", [row(i) for i in range(1000)]))
    assert summary.total == 1000
    assert summary.counts == {"up to date": 600, "behind": 200, "failed": 200}
    assert len(summary.behind) == len(summary.failed) == views.TENANTS_NAMED
    assert summary.more_behind == 180 and summary.more_failed == 180
    assert summary.failed[0] == views.TenantNote("t0", "status not read (connection_failed)")
    assert summary.failed[1] == views.TenantNote("t1", "0002_b.py failed")
    assert summary.behind[0] == views.TenantNote("t2", "1 to go: 0002_b.py")
    assert summary.behind[1] == views.TenantNote("t3", "1 to go: 0002_b.py")


def test_a_failed_tenant_says_what_failed_of_each_file() -> None:
    """A failed tenant's "why" was a bare list of names: a file that failed, one gone from the folder and a background
    migration that failed all read alike. Each name says which now."""
    from mongoshift.api import StatusRow, TenantRow

    rows = [StatusRow("0001_a.py", "failed"), StatusRow("0002_b.py", "missing"), StatusRow("0003_c.py", "applied", background="failed")]
    assert views.tenant_state(TenantRow("t", "done", result=rows)) == (
        "failed", "0001_a.py failed, 0002_b.py missing, 0003_c.py (background) failed"
    )


def test_the_charts_time_labels_are_utc_whatever_zone_the_samples_were_read_in() -> None:
    from zoneinfo import ZoneInfo

    t0 = datetime(2026, 1, 1, 9, 0, tzinfo=ZoneInfo("Asia/Tokyo"))  # 00:00 UTC
    chart = views.chart([{"at": t0, "scanned": 10}, {"at": t0 + timedelta(seconds=10), "scanned": 10}])
    assert (chart.first, chart.last) == ("2026-01-01 00:00:00", "00:00:10")


def test_a_stretch_without_samples_draws_at_zero_not_a_line_across_it() -> None:
    """Buckets at 0 s and 10 s, then none until 60 s (a completed pass, then a retry's): the line drew straight from
    10 s to 60 s, as if documents were migrated meanwhile. It drops to zero for the buckets that recorded nothing."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    samples = [{"at": t0 + timedelta(seconds=s), "scanned": 100} for s in (0, 10, 60)]
    chart = views.chart(samples)
    points = [tuple(map(float, p.split(","))) for p in chart.points.split()]
    x_of = {round((x - views.PAD) / (views.CHART_W - 2 * views.PAD) * 60): y for x, y in points}
    bottom, top = views.CHART_H - views.PAD, views.PAD
    assert x_of == {0: top, 10: top, 20: bottom, 50: bottom, 60: top}
    assert chart.buckets == 3 and chart.peak == 10.0
    one_gap = views.chart([{"at": t0 + timedelta(seconds=s), "scanned": 100} for s in (0, 20)])
    assert [float(p.split(",")[1]) for p in one_gap.points.split()] == [top, bottom, top]  # the one empty bucket at 10 s


def test_an_unknown_rate_reads_as_an_unknown_time_beside_it() -> None:
    """A migration not started read ``–`` docs/s and ``-`` left in one row: an en dash and a hyphen for one meaning."""
    from mongoshift.api import clock

    assert views.count(None) == clock(None) == "-"
    assert views.count(2350.54) == "2,350.5" and views.count(1500) == "1,500"
