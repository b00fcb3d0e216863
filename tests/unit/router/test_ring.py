import collections

import pytest

from kvpin import api
from kvpin.router import keys, ring


def members(n: int, prefix: str = "pod") -> list[api.RingMember]:
    return [api.RingMember(f"{prefix}-{i}", f"10.0.0.{i}:8000") for i in range(n)]


KEYS = [keys.digest("k", str(i)) for i in range(20_000)]


def owners(r: ring.EndpointRing) -> dict[str, str]:
    return {k: r.pick(k, {}, load_factor=1.25).member.name for k in KEYS}


def test_two_rings_with_the_same_membership_agree() -> None:
    a = ring.EndpointRing(members(5))
    b = ring.EndpointRing(list(reversed(members(5))))
    assert owners(a) == owners(b)


def test_keys_spread_over_every_member() -> None:
    counts = collections.Counter(owners(ring.EndpointRing(members(8))).values())
    assert len(counts) == 8
    mean = len(KEYS) / 8
    assert max(counts.values()) / mean < 1.25  # 160 points per member keep the spread tight


def test_a_new_member_moves_about_one_nth_of_the_keys() -> None:
    before = owners(ring.EndpointRing(members(4)))
    after = owners(ring.EndpointRing(members(5)))
    moved = [k for k in KEYS if before[k] != after[k]]
    assert all(after[k] == "pod-4" for k in moved)  # keys only move to the newcomer
    assert 0.12 < len(moved) / len(KEYS) < 0.28  # about 1/5


def test_an_address_change_moves_no_key() -> None:
    before = owners(ring.EndpointRing(members(4)))
    moved = [api.RingMember(m.name, "10.9.9.9:9000") for m in members(4)]
    assert owners(ring.EndpointRing(moved)) == before


def test_a_member_over_its_bound_is_passed_over_in_ring_order() -> None:
    r = ring.EndpointRing(members(4))
    key = KEYS[0]
    walk = [m.name for m in r.walk(key)]
    # total load 8 -> bound ceil(1.25 * 9 / 4) = 3
    loads = {walk[0]: 3, walk[1]: 3, walk[2]: 1, walk[3]: 1}
    choice = r.pick(key, loads, load_factor=1.25)
    assert choice.member.name == walk[2]
    assert choice.primary.name == walk[0]
    assert choice.spilled


def test_the_walk_is_uhashrings_range() -> None:
    r = ring.EndpointRing(members(5), virtual_nodes=40)
    for key in KEYS:
        assert [m.name for m in r.walk(key)] == [n["nodename"] for n in r._ring.range(key)]


def test_bounded_loads_hold_for_a_single_hot_key() -> None:
    r = ring.EndpointRing(members(4))
    loads: dict[str, int] = {}
    for _ in range(400):  # every request has the same key and none finishes
        name = r.pick(KEYS[0], loads, load_factor=1.25).member.name
        loads[name] = loads.get(name, 0) + 1
    walk = [m.name for m in r.walk(KEYS[0])]
    # each member fills up to the bound, ceil(1.25 x 400 / 4) = 125, in ring order
    assert [loads.get(name, 0) for name in walk] == [125, 125, 125, 25]


def test_prefer_keeps_a_moved_conversation_within_bounds() -> None:
    r = ring.EndpointRing(members(3))
    walk = [m.name for m in r.walk(KEYS[1])]
    assert r.pick(KEYS[1], {}, load_factor=1.25, prefer=walk[2]).member.name == walk[2]
    heavy = {walk[2]: 10}
    assert r.pick(KEYS[1], heavy, load_factor=1.25, prefer=walk[2]).member.name == walk[0]


def test_excluded_members_are_skipped_and_an_empty_ring_raises() -> None:
    r = ring.EndpointRing(members(2))
    walk = [m.name for m in r.walk(KEYS[2])]
    assert r.pick(KEYS[2], {}, load_factor=1.25, exclude={walk[0]}).member.name == walk[1]
    with pytest.raises(ring.NoReadyMembersError):
        r.pick(KEYS[2], {}, load_factor=1.25, exclude=set(walk))
    with pytest.raises(ring.NoReadyMembersError):
        ring.EndpointRing([]).pick(KEYS[2], {}, load_factor=1.25)


def test_two_choices_take_the_less_loaded_of_the_first_two_within_bound() -> None:
    r = ring.EndpointRing(members(4))
    walk = [m.name for m in r.walk(KEYS[3])]
    loads = {walk[0]: 1, walk[1]: 0}
    assert r.pick(KEYS[3], loads, load_factor=4.0).member.name == walk[0]
    assert r.pick(KEYS[3], loads, load_factor=4.0, choices=2).member.name == walk[1]
    assert r.pick(KEYS[3], {}, load_factor=2.0, choices=2).member.name == walk[0]  # ties: first
