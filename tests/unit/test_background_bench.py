"""bench/background.py: the order of ``--repeat``'s rounds and the verdicts on paired ratios to B3.

No server: the measurements are made up, shaped as the script records them.
"""

from __future__ import annotations

from types import ModuleType

import pytest

from ..scripts import load_script


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_script("bench/background.py")


def _row(bench: ModuleType, name: str, round_no: int, docs_per_s: float, cpu_s: float, size: int = 20_000) -> object:
    scenario = next(s for s in bench.SCENARIOS if s.name == name)
    measure = bench.Measure(wall_s=size / docs_per_s, cpu_s=cpu_s, rss_start_mb=40.0, rss_peak_mb=50.0, migrated=size)
    return bench.Row(size, name, scenario.kind, scenario.parallel, scenario.writer, 1.0, measure,
        transaction=scenario.transaction, round=round_no)


def test_every_other_round_runs_the_scenarios_in_reverse(bench: ModuleType) -> None:
    a, b, c = bench.SCENARIOS[:3]
    assert bench.rounds([a, b, c], 1) == [(1, a), (1, b), (1, c)]
    assert bench.rounds([a, b, c], 3) == [(1, a), (1, b), (1, c), (2, c), (2, b), (2, a), (3, a), (3, b), (3, c)]


def test_each_ratio_is_against_b3_of_its_own_round(bench: ModuleType) -> None:
    # B3 slows down in round 2 (a busy minute) and so does the pipeline row beside it: paired, the
    # pipeline row is 1.6x B3 in both rounds; medians of each row taken apart would give 1.2x.
    rows = [
        _row(bench, "B3 B1+guard+majority", 1, 10_000, 0.4),
        _row(bench, "engine pipeline p=1", 1, 16_000, 0.1),
        _row(bench, "engine pipeline p=1", 2, 8_000, 0.1),
        _row(bench, "B3 B1+guard+majority", 2, 5_000, 0.4),
    ]
    speeds, cpus = bench.paired_ratios(rows, "engine pipeline p=1", 20_000)
    assert speeds == [1.6, 1.6]
    assert cpus == [0.25, 0.25]
    table = bench.render(rows)
    assert (
        "* 20,000 engine pipeline p=1: throughput **1.60×** B3 (median of 2 rounds; round by round 1.60, 1.60) "
        "(throughput target ≥ 1.5, issues 11, 27) **meets**"
    ) in table
    assert "| 20,000 | 2 | engine pipeline p=1 |" in table


def test_each_row_is_held_to_its_own_targets(bench: ModuleType) -> None:
    rows = [
        _row(bench, "B3 B1+guard+majority", 1, 10_000, 0.40),
        _row(bench, "engine p=1", 1, 9_500, 0.50),  # 0.95x B3: enough for issue 4's 0.9, not for issue 27's 1.0
        _row(bench, "engine p=4", 1, 9_500, 0.80),  # held to issue 4's 0.9 only: its CPU has no target
        _row(bench, "engine txn p=1", 1, 4_000, 0.62),  # 1.55x B3's CPU: within issue 27's 1.6
    ]
    table = bench.render(rows)
    assert "engine p=1: throughput **0.95×** B3 (throughput target ≥ 1, issue 27) **misses**; CPU/doc **1.25×** B3" in table
    assert "CPU/doc target ≤ 1.3, issues 4, 11, 27) **meets**" in table
    assert "* 20,000 engine p=4: throughput **0.95×** B3 (throughput target ≥ 0.9, issue 4) **meets**" in table
    assert "* 20,000 engine txn p=1: CPU/doc **1.55×** B3 (CPU/doc target ≤ 1.6, issue 27) **meets**" in table
    assert "round by round" not in table and "| round |" not in table


def test_a_round_without_its_b3_gives_no_ratio(bench: ModuleType) -> None:
    failed = _row(bench, "B3 B1+guard+majority", 2, 10_000, 0.4)
    failed.error = "failed: exit 1"
    rows = [
        _row(bench, "B3 B1+guard+majority", 1, 10_000, 0.4),
        _row(bench, "engine pipeline p=1", 1, 12_000, 0.1),
        failed,
        _row(bench, "engine pipeline p=1", 2, 30_000, 0.1),
    ]
    speeds, _ = bench.paired_ratios(rows, "engine pipeline p=1", 20_000)
    assert speeds == [1.2]
    assert "**misses**" in bench.render(rows)


def test_the_servers_cpu_is_shown_beside_b3s_when_it_was_measured(bench: ModuleType) -> None:
    """Against one embedded server a rewrite that keeps it busy goes at its pace: the table shows what the
    server spent a document, and its ratio to B3's; a server given by --uri was not measured (dashes)."""
    b3 = _row(bench, "B3 B1+guard+majority", 1, 10_000, 0.4)
    engine = _row(bench, "engine p=1", 1, 9_000, 0.7)
    b3.measure.server_cpu_s, engine.measure.server_cpu_s = 1.70, 1.87
    table = bench.render([b3, engine])
    assert "| 0.085 | 1.00 |" in table and "| 0.094 | 1.10 |" in table
    b3.measure.server_cpu_s = engine.measure.server_cpu_s = None
    unmeasured = bench.render([b3, engine])
    assert "| 1.00 | 1.00 | – | – |" in unmeasured and "| 0.90 | 1.75 | – | – |" in unmeasured
