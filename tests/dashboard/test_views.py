"""The numbers the pages show, computed without a server: the SVG chart's points, progress, durations."""

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


def test_one_bucket_draws_a_level_line_and_none_draws_nothing() -> None:
    chart = views.chart([{"at": datetime(2026, 1, 1, tzinfo=UTC), "scanned": 50}])
    assert len(chart.points.split()) == 2 and not chart.empty
    assert views.chart([]).empty


def test_durations_read_like_a_person_would_say_them() -> None:
    assert [views.duration(s) for s in (None, 5, 65, 3_700)] == ["–", "5s", "1m 05s", "1h 01m"]
