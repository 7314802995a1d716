"""bench/embedded_speed.py: the order of ``--repeat``'s measurements and the verdicts on their medians.

No server: the measurements are made up, shaped as the script records them.
"""

from __future__ import annotations

from types import ModuleType

import pytest

from ..scripts import load_script


@pytest.fixture(scope="module")
def speed() -> ModuleType:
    return load_script("bench/embedded_speed.py")


def test_rounds_alternate_the_order_of_the_sizes(speed: ModuleType) -> None:
    assert speed.rounds([20_000, 100_000], 1) == [(1, 20_000), (1, 100_000)]
    assert speed.rounds([20_000, 100_000], 3) == [(1, 20_000), (1, 100_000), (2, 100_000), (2, 20_000), (3, 20_000), (3, 100_000)]


def test_the_flatness_verdict_is_the_median_of_each_rounds_own_ratio(speed: ModuleType) -> None:
    # docs/s of 20,000 documents: 5,000, 4,000, 5,000 (median 5,000); of 100,000: 4,000, 4,600, 4,700 (median 4,600).
    made = [(1, 20_000, 4.0), (1, 100_000, 25.0), (2, 100_000, 100_000 / 4_600), (2, 20_000, 5.0), (3, 20_000, 4.0), (3, 100_000, 100_000 / 4_700)]
    rows = [speed.Measure("current", size, 1.0, wall, wall, size, 0.5, 0.5, n) for n, size, wall in made]
    table, ok = speed.render(rows, "0" * 40)
    assert "round by round: 0.80, 1.15, 0.94; their median **0.94** (target ≥ 0.9: meets); the ratio of the sizes' medians 0.92" in table
    assert ok
    # one round alone (the first) misses, and says so with no talk of medians
    table, ok = speed.render(rows[:2], "0" * 40)
    assert "= **0.80** (target ≥ 0.9: misses)" in table
    assert "round by round" not in table
    assert not ok


def test_a_host_that_speeds_up_mid_run_does_not_decide_the_flatness_verdict(speed: ModuleType) -> None:
    # 100,000 documents run at 0.95x the docs/s of 20,000 on any one host speed. The host runs 1.4x faster from the
    # middle of round 2 on (after its 100,000, before its 20,000): the sizes' medians (7,000 and 4,750) give 0.68,
    # each round's own ratio 0.95, 0.68 and 0.95.
    docs_per_s = [(1, 20_000, 5_000), (1, 100_000, 4_750), (2, 100_000, 4_750), (2, 20_000, 7_000), (3, 20_000, 7_000), (3, 100_000, 6_650)]
    rows = [speed.Measure("current", size, 1.0, size / rate, size / rate, size, 0.5, 0.5, n) for n, size, rate in docs_per_s]
    table, ok = speed.render(rows, "0" * 40)
    assert "round by round: 0.95, 0.68, 0.95; their median **0.95** (target ≥ 0.9: meets); the ratio of the sizes' medians 0.68" in table
    assert ok
    # a 100,000 that is slower in every round misses, however the host moved
    slow = [speed.Measure(r.server, r.size, 1.0, r.wall_s * (1.2 if r.size == 100_000 else 1.0), r.wall_s, r.size, 0.5, 0.5, r.round) for r in rows]
    table, ok = speed.render(slow, "0" * 40)
    assert "their median **0.79** (target ≥ 0.9: misses)" in table
    assert not ok


def test_the_cpu_verdict_is_on_the_medians(speed: ModuleType) -> None:
    rows = [
        speed.Measure(server, 20_000, 1.0, 4.0, cpu, 20_000, 0.5, 0.5, n)
        for n, server, cpu in [
            (1, "baseline", 30.0), (1, "current", 2.0), (2, "baseline", 30.0), (2, "current", 4.0), (3, "baseline", 40.0), (3, "current", 3.0),
        ]
    ]
    table, ok = speed.render(rows, "0" * 40)
    assert "baseline ÷ current = **10.0×** (medians of 3 rounds)" in table
    assert ok
