"""Which router replica decides an endpoint (router.replicas): pure, the clock passed in."""

from __future__ import annotations

import asyncio
import collections

from kvpin.router import replicas
from tests.integration.conftest import eventually

A, B, C = "http://10.0.0.1:8080", "http://10.0.0.2:8080", "http://10.0.0.3:8080"
KEYS = [f"endpoint-{i}" for i in range(600)]  # endpoint ids


def test_every_replica_computes_the_same_owner_and_the_endpoints_spread_over_all() -> None:
    owners = {k: replicas.owner_of(k, [A, B, C]) for k in KEYS}
    assert all(replicas.owner_of(k, [C, A, B]) == owners[k] for k in KEYS)  # order: irrelevant
    counts = collections.Counter(owners.values())
    assert set(counts) == {A, B, C} and min(counts.values()) > 150  # about a third each
    # a replica leaving moves only its own endpoints
    assert all(replicas.owner_of(k, [A, B]) == o for k, o in owners.items() if o != C)
    assert replicas.owner_of("k", []) is None


def test_a_replica_relays_what_others_own_and_passes_over_one_that_failed() -> None:
    mine = replicas.Replicas(A, [A, B, C], cooldown=5.0)
    assert len(mine) == 3
    owned = {k: replicas.owner_of(k, [A, B, C]) for k in KEYS}
    assert all(mine.owner(k, 0.0) == (None if o == A else o) for k, o in owned.items())
    mine.failed(B, now=10.0)
    for k, o in owned.items():
        assert mine.owner(k, 12.0) != B
        if o == C:  # the other replicas' endpoints stay where they were
            assert mine.owner(k, 12.0) == C
    assert all(mine.owner(k, 15.0) == (None if o == A else o) for k, o in owned.items())  # back
    assert replicas.Replicas(A).owner("k", 0.0) is None  # alone: decides everything


def test_the_list_follows_updates_and_always_holds_this_replica() -> None:
    mine = replicas.Replicas(A, [A, B])
    mine.update([B, C])  # a lookup that missed this replica's own address
    assert len(mine) == 3
    assert {mine.owner(k, 0.0) for k in KEYS} == {None, B, C}
    assert replicas.urls(["10.0.0.9", "fd00::1"], like=A) == {
        "http://10.0.0.9:8080", "http://[fd00::1]:8080"}  # fmt: skip


async def test_the_list_follows_dns_and_keeps_the_last_on_a_failed_lookup() -> None:
    # real lookups of names every resolver answers (localhost) or refuses (.invalid, RFC 6761)
    mine = replicas.Replicas("http://10.9.9.9:8080")
    follow = asyncio.create_task(replicas.follow_dns(mine, "localhost", interval=0.01))

    async def resolved() -> bool:
        return len(mine) >= 2

    try:
        await eventually("localhost to resolve", resolved, within=10)
    finally:
        follow.cancel()
    found = {mine.owner(k, 0.0) for k in KEYS}
    assert "http://127.0.0.1:8080" in found and None in found
    follow = asyncio.create_task(replicas.follow_dns(mine, "nothing.invalid", interval=0.01))
    await asyncio.sleep(0.2)
    follow.cancel()
    assert {mine.owner(k, 0.0) for k in KEYS} == found
