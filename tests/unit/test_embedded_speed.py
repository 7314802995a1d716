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


def test_the_flatness_verdict_is_on_the_medians(speed: ModuleType) -> None:
    # docs/s of 20,000 documents: 5,000, 4,000, 5,000 (median 5,000); of 100,000: 4,000, 4,600, 4,700 (median 4,600).
    made = [(1, 20_000, 4.0), (1, 100_000, 25.0), (2, 100_000, 100_000 / 4_600), (2, 20_000, 5.0), (3, 20_000, 4.0), (3, 100_000, 100_000 / 4_700)]
    rows = [speed.Measure("current", size, 1.0, wall, wall, size, 0.5, 0.5, n) for n, size, wall in made]
    table, ok = speed.render(rows, "0" * 40)
    assert "= **0.92** (medians of 3 rounds) (target ≥ 0.9: meets)" in table
    assert "round by round: 0.80, 1.15, 0.94 (their median 0.94)" in table
    assert ok
    # one round alone (the first) misses, and says so with no talk of medians
    table, ok = speed.render(rows[:2], "0" * 40)
    assert "= **0.80** (target ≥ 0.9: misses)" in table
    assert "round by round" not in table
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
