import collections

from kvpin import api
from kvpin.router import keys, ring


def members(n: int, prefix: str = "pod") -> list[api.RingMember]:
    return [api.RingMember(f"{prefix}-{i}", f"10.0.0.{i}:8000") for i in range(n)]


KEYS = [keys.digest("k", str(i)) for i in range(20_000)]


def owners(r: ring.EndpointRing) -> dict[str, str]:
    return {k: next(r.walk(k)).name for k in KEYS}


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


def test_members_over_the_bound_are_passed_over_in_ring_order() -> None:
    r = ring.EndpointRing(members(4))
    walk = list(r.walk(KEYS[0]))
    names = [m.name for m in walk]
    # total load 16 -> bound ceil(1.25 * 17 / 4) = 6
    loads = {names[0]: 6, names[1]: 6, names[2]: 2, names[3]: 2}
    kept = ring.within_bound(walk, loads, load_factor=1.25, size=4)
    assert [m.name for m in kept] == [names[2], names[3]]
    # only excluded members are below it: the least loaded of the walk
    assert ring.within_bound(walk[:2], loads, load_factor=1.25, size=4) == [walk[0]]


def test_the_walk_is_uhashrings_range() -> None:
    r = ring.EndpointRing(members(5), virtual_nodes=40)
    for key in KEYS:
        assert [m.name for m in r.walk(key)] == [n["nodename"] for n in r._ring.range(key)]


def test_bounded_loads_hold_for_a_single_hot_key() -> None:
    r = ring.EndpointRing(members(4))
    loads: dict[str, int] = {}
    walk = list(r.walk(KEYS[0]))
    for _ in range(400):  # every request has the same key, takes the first within bound
        name = ring.within_bound(walk, loads, load_factor=1.25, size=4)[0].name
        loads[name] = loads.get(name, 0) + 1
    # each member fills up to the bound, ceil(1.25 x 400 / 4) = 125, in ring order
    assert [loads.get(m.name, 0) for m in walk] == [125, 125, 125, 25]


def test_an_empty_ring_walks_nowhere() -> None:
    assert list(ring.EndpointRing([]).walk(KEYS[2])) == []


def test_at_low_load_a_member_may_take_a_few_requests() -> None:
    r = ring.EndpointRing(members(4))
    walk = list(r.walk(KEYS[0]))
    # ceil(2.0 x 2 / 4) = 1 would pass over the only busy member; the floor keeps it
    loads = {walk[0].name: 1}
    assert ring.within_bound(walk, loads, load_factor=2.0, size=4)[0] == walk[0]
    # a burst: five in flight, three of them on the home; ceil(2.0 x 6 / 4) = 3 passed it over
    loads = {walk[0].name: 3, walk[1].name: 1, walk[2].name: 1}
    assert ring.within_bound(walk, loads, load_factor=2.0, size=4)[0] == walk[0]
    loads = {walk[0].name: ring.MIN_BOUND}
    assert ring.within_bound(walk, loads, load_factor=2.0, size=4)[0] == walk[1]


def test_the_ring_is_uhashrings_ketama_ring_with_the_given_virtual_nodes() -> None:
    from uhashring import HashRing

    names = [m.name for m in members(4)]
    for vnodes in (40, 160):
        reference = HashRing(
            nodes={n: {"instance": n, "vnodes": vnodes} for n in names}, hash_fn="ketama"
        )
        r = ring.EndpointRing(members(4), virtual_nodes=vnodes)
        for key in KEYS[:300]:
            assert next(r.walk(key)).name == reference.get_node(key)
    assert ring.EndpointRing(members(3), virtual_nodes=40).virtual_nodes == 40


def test_when_every_member_is_over_the_bound_the_least_loaded_takes_it() -> None:
    walk = members(3)
    loads = {"pod-0": 9, "pod-1": 3, "pod-2": 5}
    kept = ring.within_bound(walk, loads, load_factor=1.0, size=10)  # bound 2: all over
    assert [m.name for m in kept] == ["pod-1"]


def test_a_ring_has_160_virtual_nodes_per_member_unless_told() -> None:
    # ketama places 4 points per virtual node (one per 4 bytes of an md5)
    assert len(ring.EndpointRing(members(3))._positions) == 3 * 160 * 4
