import pytest

from kvpin.bench import targets

POOLS = {"ep": ["a", "b", "c"]}


def test_round_robin_cycles() -> None:
    t = targets.Baseline("round-robin", POOLS)
    assert [t.pick("ep") for _ in range(4)] == ["a", "b", "c", "a"]


def test_least_inflight_follows_completions() -> None:
    t = targets.Baseline("least-inflight", POOLS)
    assert [t.pick("ep") for _ in range(3)] == ["a", "b", "c"]
    t.done("b")
    assert t.pick("ep") == "b"


def test_random_is_seeded() -> None:
    a = targets.Baseline("random", POOLS, seed=3)
    b = targets.Baseline("random", POOLS, seed=3)
    assert [a.pick("ep") for _ in range(10)] == [b.pick("ep") for _ in range(10)]
    with pytest.raises(ValueError):
        targets.Baseline("fastest", POOLS)


def test_routed_sends_everything_to_the_router_or_its_replicas_in_turn() -> None:
    assert targets.Routed({"ep": "http://router"}).pick("ep") == "http://router"
    replicas = targets.Routed({"ep": ["http://r1", "http://r2", "http://r3"]})
    assert [replicas.pick("ep") for _ in range(4)] == ["http://r1", "http://r2", "http://r3",
                                                       "http://r1"]  # fmt: skip
