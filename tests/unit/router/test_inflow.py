"""What each member's cache took in lately, from the engines' counters (router.inflow)."""

import itertools
import math
from collections.abc import Mapping

import pytest

from kvpin.router.inflow import Inflow

_clock = itertools.count()


def read(inflow: Inflow, counts: Mapping[str, float], horizon: float = 1e12) -> None:
    """One scrape of every member in `counts`, each a new reading."""
    at = next(_clock)
    inflow.observe("ep", {m: (at, c) for m, c in counts.items()}, horizon)


def test_a_first_reading_is_a_baseline_and_growth_counts_from_there() -> None:
    inflow = Inflow()
    read(inflow, {"a": 5_000_000, "b": 0})  # up for days, or new
    assert inflow.of("ep", "a") == inflow.of("ep", "b") == 0
    read(inflow, {"a": 5_001_000, "b": 3000})
    assert inflow.of("ep", "a") == pytest.approx(1000)
    assert inflow.of("ep", "b") == pytest.approx(3000)
    assert inflow.of("ep", "unknown") == inflow.of("other", "a") == 0


def test_counts_decay_as_the_pool_takes_in_its_cache_size_not_with_time() -> None:
    inflow = Inflow()
    read(inflow, {"a": 0, "b": 0}, horizon=10_000)
    read(inflow, {"a": 4000, "b": 0}, horizon=10_000)
    read(inflow, {"a": 4000, "b": 0}, horizon=10_000)  # no growth: nothing decays
    assert inflow.of("ep", "a") == pytest.approx(4000)
    read(inflow, {"a": 4000, "b": 10_000}, horizon=10_000)  # one pool's cache later
    assert inflow.of("ep", "a") == pytest.approx(4000 / math.e)
    assert inflow.of("ep", "b") == pytest.approx(10_000)


def test_one_readings_growth_counts_alike_whatever_order_members_come_in() -> None:
    one, other = Inflow(), Inflow()
    for inflow, order in ((one, ("a", "b")), (other, ("b", "a"))):
        read(inflow, dict.fromkeys(order, 0), horizon=5000)
        read(inflow, dict.fromkeys(order, 2000), horizon=5000)
    assert one.of("ep", "a") == one.of("ep", "b") == other.of("ep", "a") == other.of("ep", "b")


def test_the_same_reading_seen_again_counts_once() -> None:
    inflow = Inflow()
    inflow.observe("ep", {"a": (1.0, 0)}, 1e12)
    for _ in range(3):  # every request between two scrapes sees the last one
        inflow.observe("ep", {"a": (2.0, 500)}, 1e12)
    assert inflow.of("ep", "a") == pytest.approx(500)


def test_own_sends_count_until_the_next_reading() -> None:
    inflow = Inflow()
    inflow.sent("ep", "a", 900)  # never read: nothing to add to
    assert inflow.of("ep", "a") == 0
    read(inflow, {"a": 0, "b": 0})
    inflow.sent("ep", "a", 900)
    inflow.sent("ep", "a", 100)
    assert inflow.of("ep", "a") == pytest.approx(1000) and inflow.of("ep", "b") == 0
    read(inflow, {"a": 1000, "b": 0})  # the engine counted them: not twice
    assert inflow.of("ep", "a") == pytest.approx(1000)


def test_a_counter_that_went_back_restarted_and_counts_from_zero() -> None:
    inflow = Inflow()
    read(inflow, {"a": 9000})
    read(inflow, {"a": 700})  # the engine restarted
    assert inflow.of("ep", "a") == pytest.approx(700)


def test_members_that_leave_are_forgotten_and_an_empty_endpoint_dropped() -> None:
    inflow = Inflow()
    read(inflow, {"a": 0, "b": 0})
    read(inflow, {"a": 100, "b": 200})
    inflow.sent("ep", "a", 50)
    inflow.forget("ep", {"a"})
    assert inflow.of("ep", "a") == 0 and inflow.of("ep", "b") == pytest.approx(200)
    read(inflow, {"a": 100})  # back, with a new baseline
    assert inflow.of("ep", "a") == 0
    inflow.forget("ep", {"a", "b"})
    assert inflow.of("ep", "b") == 0 and not inflow._total and not inflow._horizon
