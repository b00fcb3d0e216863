"""What each member's cache took in lately (router.churn), from the engines' own counters."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvpin.router import bodies, holdings, proxy
from kvpin.router.churn import Churn


def read(**counters: float) -> dict[str, tuple[float, float]]:
    """Engine counters read at time 0."""
    return {name: (total, 0.0) for name, total in counters.items()}


def test_a_count_starts_at_the_first_read_and_decays_by_e_over_one_horizon() -> None:
    churn = Churn()
    assert churn.of("ep", "a") is None  # never read: no count, not zero
    churn.observe("ep", read(a=7_000, b=9_000), horizon=1000)  # what came before: not lately
    assert (churn.of("ep", "a"), churn.of("ep", "b")) == (0, 0)
    churn.observe("ep", read(a=7_500, b=9_000), horizon=1000)
    assert churn.of("ep", "a") == 500  # what it took in since; nothing decays it yet
    churn.observe("ep", read(a=7_500, b=10_000), horizon=1000)  # the pool took in a horizon
    assert churn.of("ep", "b") == 1000  # its own tokens count from when they came
    assert churn.of("ep", "a") == pytest.approx(500 / math.e)


def test_the_same_read_twice_changes_nothing() -> None:
    churn = Churn()
    churn.observe("ep", read(a=0, b=0), horizon=100)
    for _ in range(3):
        churn.observe("ep", read(a=50, b=0), horizon=100)
    assert churn.of("ep", "a") == 50  # read once, counted once
    assert churn.of("ep", "b") == 0


def test_an_engine_whose_counter_went_back_restarted_with_an_empty_cache() -> None:
    churn = Churn()
    churn.observe("ep", read(a=0), horizon=10_000)
    churn.observe("ep", read(a=4_000), horizon=10_000)
    assert churn.of("ep", "a") > 0
    churn.observe("ep", read(a=100), horizon=10_000)
    assert churn.of("ep", "a") == 0
    churn.observe("ep", read(a=300), horizon=10_000)
    assert churn.of("ep", "a") == 200


def test_what_this_replica_sent_counts_until_a_read_taken_after_it() -> None:
    churn = Churn()
    churn.sent("ep", "a", 500, now=1.0)  # never read: nothing to add to
    assert churn.of("ep", "a") is None
    churn.observe("ep", {"a": (0, 2.0)}, horizon=10_000)
    churn.sent("ep", "a", 500, now=3.0)
    churn.sent("ep", "a", 0, now=3.5)  # all cached: nothing taken in
    churn.sent("ep", "a", 300, now=4.0)
    assert churn.of("ep", "a") == 800  # before the engine says: a burst does not pile up
    churn.observe("ep", {"a": (500, 3.5)}, horizon=10_000)  # read between the two sends
    assert churn.of("ep", "a") == 500 + 300
    churn.observe("ep", {"a": (800, 4.5)}, horizon=10_000)  # read after both: counted once
    both = 500 * math.exp(-300 / 10_000) + 300  # the first decayed as the pool took in more
    assert churn.of("ep", "a") == pytest.approx(both)
    churn.observe("ep", {"a": (800, 4.0)}, horizon=10_000)  # an older read comes late
    churn.sent("ep", "a", 100, now=4.2)
    assert churn.of("ep", "a") == pytest.approx(both)  # the newer read counted it already


def test_members_and_endpoints_are_forgotten() -> None:
    churn = Churn()
    churn.observe("ep", read(a=0, b=0), horizon=100)
    churn.observe("other", read(a=0), horizon=100)
    churn.forget("ep", {"a"})
    assert churn.of("ep", "a") is None and churn.of("ep", "b") == 0
    assert churn.of("other", "a") == 0  # another endpoint's member of the same name stays
    churn.forget("ep", {"b"})
    assert churn._members.keys() == {"other"}  # an endpoint with no member left goes whole
    churn.forget("gone", {"a"})  # nothing known: nothing to do


reads = st.lists(st.lists(st.integers(0, 50_000), min_size=3, max_size=3), min_size=1, max_size=40)


@given(reads, st.floats(1_000, 1e7))
def test_counts_stay_bounded_by_one_horizon_and_the_largest_read(
    steps: list[list[int]], horizon: float
) -> None:
    # each member's counter only grows (the increments are drawn), however they are read
    churn = Churn()
    totals = [0, 0, 0]
    churn.observe("ep", read(**dict(zip("abc", totals, strict=True))), horizon)
    largest = 0
    for step in steps:
        totals = [t + s for t, s in zip(totals, step, strict=True)]
        churn.observe("ep", read(**dict(zip("abc", totals, strict=True))), horizon)
        largest = max(largest, sum(step))
        counts = [churn.of("ep", m) for m in "abc"]
        assert all(c is not None and c >= 0 for c in counts)
        assert sum(counts) <= horizon + largest + 1e-6 * horizon
    assert sum(churn.of("ep", m) for m in "abc") <= sum(totals) + 1e-6


def test_only_a_first_turn_at_least_one_index_chunk_long_is_placed_by_churn() -> None:
    def summary(*contents: str) -> bodies.Summary:
        roles = ["user", "assistant"] * len(contents)
        messages = [{"role": r, "content": c} for r, c in zip(roles, contents, strict=False)]
        return bodies.summarize_body({"model": "ep", "messages": messages})

    long = "x" * holdings.CHUNK_CHARS
    assert proxy.opening(summary(long))
    assert not proxy.opening(summary("a short first question"))  # the index cannot see it
    assert not proxy.opening(summary(long, "an answer", long))  # a later turn
