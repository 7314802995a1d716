"""The adaptive controller on durations it is fed: no clock, no server (docs/background.md, "Batch size")."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from mongoshift.background.lanes.throttle import WINDOW, AdaptiveController
from mongoshift.background.state.events import describe_throttle
from mongoshift.schema.background import Adaptive, Background


def batch(c: AdaptiveController, *, work_ms: float, wait_ms: float = 0.0, overhead_ms: float = 0.0, **kw: object) -> object:
    """One batch at the controller's size: the lane's waits before it, then its work plus bookkeeping."""
    c.waited(wait_ms, health_ms=float(kw.pop("health_ms", 0.0)))  # type: ignore[arg-type]
    return c.record(work_ms, elapsed_ms=work_ms + overhead_ms, docs=int(kw.pop("docs", c.batch_size())), **kw)  # type: ignore[arg-type]


def window(c: AdaptiveController, **kw: object) -> list[object]:
    return [batch(c, **kw) for _ in range(WINDOW)]  # type: ignore[arg-type]


def test_it_grows_by_a_fifth_a_window_on_an_idle_server_up_to_its_bound() -> None:
    """Fast batches (5 ms of work behind a 100 ms pause): the lane works 5% of its time, far under 90%."""
    c = AdaptiveController(Adaptive(), 100)
    assert (c.min_size, c.max_size) == (10, 1000)  # batch_size is the start; ten times it the default bound
    assert batch(c, work_ms=5, wait_ms=100) is None  # the first batch warms up: not judged
    sizes = [c.batch_size()]
    while c.batch_size() < c.max_size:
        changes = window(c, work_ms=5, wait_ms=100)
        assert changes == [None] * (WINDOW - 1) + ["grow"]  # judged once a window is full, not before
        sizes.append(c.batch_size())
    assert sizes == [100, 120, 144, 172, 206, 247, 296, 355, 426, 511, 613, 735, 882, 1000]
    assert window(c, work_ms=5, wait_ms=100) == [None] * WINDOW  # at its bound it stays
    assert c.state() == {"batch_size": 1000, "pause_ms": 0, "reason": "grow", "work_percent": 5, "batch_ms": 5}


def test_it_shrinks_under_injected_latency_then_pauses_at_its_smallest_size_and_recovers() -> None:
    c = AdaptiveController(Adaptive(target_latency_ms=100, min_batch_size=10, max_pause_ms=1000), 20)
    batch(c, work_ms=5)
    sizes, pauses = [], []
    for _ in range(8):  # every batch takes 2 s against a 100 ms target
        assert window(c, work_ms=2000)[-1] == "slow"
        sizes.append(c.batch_size())
        pauses.append(c.pause_ms())
    assert sizes == [17, 15, 13, 11, 10, 10, 10, 10]  # at most a fifth less each time, down to min_batch_size
    assert pauses == [0, 0, 0, 0, 0, 100, 200, 400]  # then the pause doubles
    assert describe_throttle({"change": "slow", **c.pace(), **c.why(), "changes": 1, "overloads": 0}) == (
        "smaller, batches took 2,000 ms on average to read, transform and write, over the 100 ms target; "
        "batch size at its smallest, 10, adaptive pause 400 ms before each batch; 1 change since the last report, 0 overloads"
    )
    # Fast again (20 ms of work, 10 of pause): the pause is halved first, then the size grows.
    recovered = [window(c, work_ms=20, wait_ms=10)[-1] for _ in range(4)]
    assert recovered == ["recover", "recover", "recover", "grow"]
    assert (c.pause_ms(), c.batch_size()) == (0, 12)


def test_a_work_share_over_the_target_shrinks_it_and_one_inside_the_band_holds_it() -> None:
    c = AdaptiveController(Adaptive(target_work_percent=80), 500)
    batch(c, work_ms=10)
    assert window(c, work_ms=99, overhead_ms=1)[-1] == "shrink"  # 99% working, no pause at all
    assert c.batch_size() == 417 and c.state()["work_percent"] == 99
    assert window(c, work_ms=80, overhead_ms=20) == [None] * WINDOW  # 80%: on target
    assert window(c, work_ms=76, wait_ms=24) == [None] * WINDOW  # 76%: within 5 points of it
    # 50% from now on: the window slides, so the first such batch makes it 67% (76, 76, 50), under 75%
    assert window(c, work_ms=50, wait_ms=50) == ["grow", None, None]
    assert c.batch_size() == 495 and c.state()["work_percent"] == 67  # × 0.80/0.67 = × 1.19
    assert window(c, work_ms=50, wait_ms=50) == ["grow", None, None] and c.batch_size() == 594  # then × 1.2 at most


def test_one_slow_batch_among_fast_ones_does_not_shrink_it_but_a_slow_window_does() -> None:
    c = AdaptiveController(Adaptive(target_latency_ms=500), 100)
    batch(c, work_ms=5)
    assert [batch(c, work_ms=ms, wait_ms=50) for ms in (1200, 100, 100)] == [None, None, None]  # mean 467 ms
    assert c.batch_size() == 100
    assert batch(c, work_ms=1400, wait_ms=50) == "slow"  # the window is now 100, 100, 1400: mean 533 ms
    assert c.batch_size() == 94  # ceil(100 × 500/533): the factor the overrun asks for, not a fifth


def test_an_overload_shrinks_it_at_once_even_in_the_middle_of_a_window() -> None:
    c = AdaptiveController(Adaptive(min_batch_size=80), 100)
    assert c.record(30, overloaded=True) == "overload"  # even the first batch
    assert c.batch_size() == 84
    batch(c, work_ms=5, wait_ms=100)
    assert c.record(30, overloaded=True) == "overload" and c.batch_size() == 80  # the window starts again
    assert c.record(30, overloaded=True) == "overload" and c.pause_ms() == 100  # at the smallest: a pause
    assert window(c, work_ms=5, wait_ms=100)[-1] == "recover" and c.pause_ms() == 0


def test_it_grows_no_further_than_the_target_latency_allows() -> None:
    c = AdaptiveController(Adaptive(target_latency_ms=500), 100)
    batch(c, work_ms=5)
    assert window(c, work_ms=450, wait_ms=2000)[-1] == "grow"  # 18% working, but 450 ms of 500 per batch
    assert c.batch_size() == 111  # × 500/450, not × 1.2
    assert window(c, work_ms=499, wait_ms=2000) == [None] * WINDOW  # one more document would pass the target


def test_health_waits_in_the_window_keep_it_from_growing() -> None:
    c = AdaptiveController(Adaptive(), 100)
    batch(c, work_ms=5)
    assert [batch(c, work_ms=5, wait_ms=100, health_ms=ms) for ms in (0, 80, 0)] == [None] * WINDOW
    assert c.batch_size() == 100
    # The window slides: once the batch that waited for health is out of it, the size grows again.
    assert window(c, work_ms=5, wait_ms=100) == [None, "grow", None] and c.batch_size() == 120


def test_conflicts_over_one_in_twenty_documents_shrink_it() -> None:
    c = AdaptiveController(Adaptive(), 100)
    batch(c, work_ms=5)
    assert window(c, work_ms=5, wait_ms=100, conflicts=5)[-1] == "grow"  # 5%: not over
    assert window(c, work_ms=5, wait_ms=100, conflicts=20)[-1] == "conflicts"
    assert c.batch_size() == 100 and c.why()["conflict_percent"] == 17


def test_a_partial_batch_is_not_judged() -> None:
    c = AdaptiveController(Adaptive(), 100)
    batch(c, work_ms=5)
    assert [batch(c, work_ms=1, wait_ms=100, docs=3) for _ in range(5)] == [None] * 5
    assert c.samples == []


def test_its_state_is_saved_and_a_resumed_controller_starts_from_it_without_warming_up() -> None:
    c = AdaptiveController(Adaptive(), 100)
    batch(c, work_ms=5)
    window(c, work_ms=5, wait_ms=100)
    saved = c.state()
    resumed = AdaptiveController(Adaptive(), 100, saved)
    assert resumed.batch_size() == 120 and resumed.state() == saved
    assert window(resumed, work_ms=5, wait_ms=100)[-1] == "grow"  # its first window counts
    old = AdaptiveController(Adaptive(), 100, {"batch_size": 60, "pause_ms": 100})  # saved by an earlier version
    assert old.state() == {"batch_size": 60, "pause_ms": 100, "reason": "resumed"}
    assert AdaptiveController(Adaptive(max_batch_size=50), 100, saved).batch_size() == 50  # bounds hold over a saved size


def test_the_bounds_and_start_a_user_need_not_give() -> None:
    assert Adaptive().bounds(500) == (10, 5000)
    assert Adaptive().bounds(2000) == (10, 10_000)
    assert Adaptive().bounds(5) == (5, 50)  # a batch_size under min_batch_size is the lower bound: the start is as given
    assert Adaptive(max_batch_size=300, min_batch_size=50).bounds(500) == (50, 300)
    assert AdaptiveController(Adaptive(max_batch_size=300), 500).batch_size() == 300
    assert Background(collection="c", from_version=1, to_version=2, migrate=lambda d, c: d).adaptive == Adaptive()
    with pytest.raises(ValueError, match="target_work_percent"):
        Adaptive(target_work_percent=99)


SIZES = st.integers(min_value=1, max_value=10_000)
BATCH = st.tuples(
    st.floats(min_value=0, max_value=1e7, allow_nan=False),  # work ms
    st.floats(min_value=0, max_value=1e6, allow_nan=False),  # bookkeeping ms
    st.floats(min_value=0, max_value=1e7, allow_nan=False),  # waits before it, ms
    st.floats(min_value=0, max_value=1e6, allow_nan=False),  # of which health
    st.floats(min_value=0, max_value=1),  # share of the size read
    st.floats(min_value=0, max_value=1),  # share of those that conflicted
    st.booleans(),  # overloaded
)


@given(
    start=SIZES,
    low=SIZES,
    high=st.none() | SIZES,
    target_ms=st.integers(1, 600_000),
    target_percent=st.integers(10, 95),
    saved=st.none() | st.fixed_dictionaries({"batch_size": st.integers(-5, 20_000), "pause_ms": st.integers(-5, 10**7)}),
    batches=st.lists(BATCH, max_size=60),
)
def test_it_never_leaves_its_bounds_and_never_moves_more_than_a_fifth_a_step(
    start: int, low: int, high: int | None, target_ms: int, target_percent: int, saved: dict[str, int] | None, batches: list[tuple[float, ...]]
) -> None:
    if high is not None and high < low:
        low, high = high, low
    options = Adaptive(min_batch_size=low, max_batch_size=high, target_latency_ms=target_ms, target_work_percent=target_percent, max_pause_ms=30_000)
    c = AdaptiveController(options, start, saved)
    lowest, highest = options.bounds(start)
    assert lowest <= c.batch_size() <= highest
    for work, overhead, wait, health, read, conflicted, overloaded in batches:
        before = c.batch_size()
        docs = round(before * read)
        c.waited(wait, health_ms=min(health, wait))
        if overloaded:
            c.record(work, overloaded=True)
        else:
            c.record(work, elapsed_ms=work + overhead, docs=docs, conflicts=round(docs * conflicted))
        after = c.batch_size()
        assert lowest <= after <= highest
        assert 0 <= c.pause_ms() <= options.max_pause_ms
        if after > before:  # by a fifth at most (a single document when a fifth is less than one)
            assert after <= max(before + 1, before * 1.2 + 1e-6)
        if after < before:
            assert after >= min(before - 1, before / 1.2 - 1e-6)


def test_status_says_in_words_how_batches_are_sized_and_why() -> None:
    from mongoshift.background.inspect.status import pace_words

    sizing = {
        "mode": "adaptive", "start": 500, "min": 10, "max": 5000, "target_work_percent": 90, "target_latency_ms": 500, "open": 12,
        "lanes": [
            {"partition": 3, "leased": True, "batch_size": 1440, "pause_ms": 0, "reason": "grow", "work_percent": 61, "batch_ms": 120},
            {"partition": 5, "leased": True, "batch_size": 10, "pause_ms": 400, "reason": "slow", "work_percent": 70, "batch_ms": 1840},
            {"partition": 7, "leased": False, "batch_size": 400, "pause_ms": 0, "reason": "resumed"},
        ],
    }
    assert pace_words(sizing) == [
        "adaptive from 500, within 10–5,000: aims at 90% of a lane's time reading and writing, batches within 500 ms",
        "partition 3 (leased): 1,440 (grew, the lane worked 61% of its time, under 90%)",
        "partition 5 (leased): 10 (shrank, batches took 1,840 ms, over 500 ms), adaptive pause 400 ms",
        "partition 7: 400 (as saved)",
        "and 9 more open partitions",
    ]
    assert pace_words({"mode": "fixed", "start": 500}) == ["500, fixed (adaptive=False)"]
    assert pace_words({"mode": "transaction", "start": 100}) == [
        "up to 100: each transaction's batch is halved when it fails, grown back after clean ones"
    ]
    assert pace_words({"mode": "step"}) == [] and pace_words({}) == []


def test_a_clock_that_does_not_move_changes_nothing() -> None:
    c = AdaptiveController(Adaptive(), 100)
    batch(c, work_ms=0)
    assert [window(c, work_ms=0) for _ in range(3)] == [[None] * WINDOW] * 3 and c.batch_size() == 100


def test_status_says_the_adaptive_sizes_are_set_aside_while_a_throttle_holds_the_batch_size() -> None:
    """Found in a user trial: under 'background throttle --batch-size 50', the detail view still listed each partition's
    adaptive size (151) as the batch size, with nothing saying the lanes used 50."""
    import dataclasses

    from mongoshift.cli.background_view import details

    from .test_progress_rate import reading

    sizing = {"mode": "adaptive", "start": 500, "min": 10, "max": 5000, "target_work_percent": 90, "target_latency_ms": 500, "open": 1,
              "lanes": [{"partition": 0, "leased": True, "batch_size": 151, "pause_ms": 0, "reason": "shrink", "work_percent": 95}]}
    held = dataclasses.replace(reading(100), batch_size=sizing, throttle={"batch_size": 50})
    said = [value for label, value in details(held) if label == "batch size"]
    assert said[0].endswith("; set aside while 'background throttle' holds batches at 50 (the sizes below are used again once it is cleared)")
    assert said[1] == "partition 0 (leased): 151 (shrank, the lane worked 95% of its time, over 90%)"
    paused_only = dataclasses.replace(held, throttle={"pause_ms": 1000})  # a pause alone leaves the sizes in use
    assert "set aside" not in next(value for label, value in details(paused_only) if label == "batch size")
