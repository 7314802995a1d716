"""The suite's hypothesis profile (tests/conftest.py): property tests pass however loaded the machine is.

Each check makes hypothesis see a slow machine on purpose, by sleeping where load would stall it:
under hypothesis' defaults both raise (a deadline, the ``too_slow`` health check)."""

from __future__ import annotations

import time

from hypothesis import given, settings, strategies as st


def test_a_slow_example_is_not_a_failure() -> None:
    """An example that takes longer than hypothesis' default 200 ms deadline still passes."""
    calls: list[int] = []

    @settings(max_examples=2)
    @given(st.integers())
    def slow(n: int) -> None:
        time.sleep(0.3)
        calls.append(n)

    slow()
    assert calls


def test_slow_data_generation_is_not_a_failed_health_check() -> None:
    """Drawing the examples slowly (a loaded machine) fails no health check."""
    drawn: list[int] = []

    def slowly(n: int) -> int:
        time.sleep(0.6)  # past the default 1 s for the examples after the first, whatever the load
        return n

    @settings(max_examples=4)
    @given(st.integers().map(slowly))
    def check(n: int) -> None:
        drawn.append(n)

    check()
    assert drawn


def test_the_examples_are_the_same_on_every_run() -> None:
    """Derandomized: a failure seen once is seen again on the next run."""
    runs: list[list[int]] = []
    for _ in range(2):
        seen: list[int] = []

        @settings(max_examples=10)
        @given(st.integers())
        def record(n: int) -> None:
            seen.append(n)  # noqa: B023  (each run records into its own list, read right after)

        record()
        runs.append(seen)
    assert runs[0] == runs[1]
