"""What each member's cache took in lately (router.inflow): decayed by the endpoint's turnover."""

import math

import pytest

from kvpin.router.inflow import DEFAULT_HORIZON_TOKENS, Inflow


def test_a_count_decays_by_e_over_one_horizon_of_what_the_endpoint_took_in() -> None:
    inflow = Inflow()
    inflow.resize("ep", 1000)
    inflow.add("ep", "a", 500)
    assert inflow.of("ep", "a") == 500
    inflow.add("ep", "b", 1000)  # the endpoint took in a horizon more: a's count is 1/e
    assert inflow.of("ep", "a") == pytest.approx(500 / math.e)
    assert inflow.of("ep", "b") == 1000  # its own tokens count from when they came
    inflow.add("ep", "a", 100)
    assert inflow.of("ep", "a") == pytest.approx(500 / math.e + 100)


def test_time_alone_decays_nothing_and_endpoints_are_apart() -> None:
    inflow = Inflow()
    inflow.add("ep", "a", 300)
    inflow.add("other", "a", 5 * DEFAULT_HORIZON_TOKENS)  # another endpoint's churn
    assert inflow.of("ep", "a") == 300
    assert inflow.of("ep", "never-sent") == 0
    inflow.add("ep", "b", DEFAULT_HORIZON_TOKENS)  # unknown cache size: the default horizon
    assert inflow.of("ep", "a") == pytest.approx(300 / math.e)


def test_a_member_whose_cache_is_gone_starts_from_nothing() -> None:
    inflow = Inflow()
    inflow.resize("ep", 1000)
    inflow.add("ep", "a", 400)
    inflow.add("ep", "b", 400)
    inflow.forget("ep", {"a"})
    assert inflow.of("ep", "a") == 0
    assert inflow.of("ep", "b") == 400
    inflow.forget("ep", {"b"})  # none left: the endpoint's totals go too
    assert inflow._total == {} and inflow._horizon == {}  # bounded by what is live
