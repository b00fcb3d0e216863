"""The router's choice for one attempt (Proxy.choose) on a real Proxy with no network: the
placement index, in-flight loads and outlier state are set the way traffic would leave them.
Expected members are worked out from the ring walk and the rules, not taken from a run."""

from __future__ import annotations

import dataclasses
import hashlib
import time

from kvpin import api
from kvpin.router import holdings, placement
from kvpin.router.config import EndpointConfig, ProxySettings, RoutingConfig
from kvpin.router.membership.base import FixedMembership
from kvpin.router.metrics import build_metrics
from kvpin.router.proxy import Facts, Proxy

NAMES = ("pod-a", "pod-b", "pod-c")
SCOPE = b""


MEMBERS = tuple(api.RingMember(n, f"127.0.0.1:{9000 + i}") for i, n in enumerate(NAMES))


async def proxy_with(**routing: object) -> tuple[Proxy, FixedMembership]:
    config = EndpointConfig("ep", MEMBERS, RoutingConfig(**routing))  # type: ignore[arg-type]
    membership = FixedMembership({"ep": config})
    proxy = Proxy(membership, ProxySettings(engine_metrics_interval=0), build_metrics())
    await membership.start()
    return proxy, membership


async def proxy_for(**routing: object) -> tuple[Proxy, object]:
    proxy, membership = await proxy_with(**routing)
    return proxy, membership.endpoints["ep"]


def chunks(conversation: str, n: int) -> bytes:
    return b"".join(
        hashlib.blake2b(f"{conversation}/{i}".encode(), digest_size=holdings.HASH_BYTES).digest()
        for i in range(n)
    )


def facts(key: str, n_chunks: int, *, previous_tokens: int = 0) -> Facts:
    chars = n_chunks * holdings.CHUNK_CHARS + 400  # the chunks and a short new user turn
    return Facts(key=key, fresh_key=key, scope=SCOPE, chunks=chunks(key, n_chunks),
                 prompt_chars=chars, prompt_tokens=chars // 4,
                 previous_tokens=previous_tokens)  # fmt: skip


def walk(endpoint, key: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [m.name for m in endpoint.ring.walk(key)]


async def test_a_later_turn_goes_home_even_when_home_is_not_its_ring_owner() -> None:
    proxy, endpoint = await proxy_for()
    order = walk(endpoint, "conv-1")
    home = order[2]  # where an earlier turn was placed (a move, say)
    proxy._holdings("ep").record(SCOPE, chunks("conv-1", 10), home)
    placed = proxy.choose(endpoint, facts("conv-1", 10), set())
    assert placed.member.name == home
    assert not placed.spilled and not placed.moved
    assert placed.uncached == 100  # the new turn's 400 characters at 4 per token


async def test_a_busy_ring_owner_is_no_spill_for_a_conversation_at_home_elsewhere() -> None:
    proxy, endpoint = await proxy_for(load_factor=1.0)
    order = walk(endpoint, "conv-2")
    home = order[1]
    proxy._holdings("ep").record(SCOPE, chunks("conv-2", 10), home)
    proxy.loads["ep"][order[0]] = 6  # bound max(4, ceil(7 / 3)) = 4: the owner is over it
    placed = proxy.choose(endpoint, facts("conv-2", 10), set())
    assert placed.member.name == home
    assert not placed.spilled  # the owner was over the cap, but nothing was kept off its home


async def test_a_home_over_the_cap_is_passed_over_and_that_is_a_spill() -> None:
    proxy, endpoint = await proxy_for(load_factor=1.0)
    order = walk(endpoint, "conv-3")
    home = order[1]
    proxy._holdings("ep").record(SCOPE, chunks("conv-3", 10), home)
    proxy.loads["ep"][home] = 6
    placed = proxy.choose(endpoint, facts("conv-3", 10), set())
    assert placed.member.name == order[0]  # nothing cached elsewhere: the walk's first
    assert placed.spilled


async def test_a_retry_skips_the_tried_member_and_everyone_ejected_is_still_tried() -> None:
    proxy, endpoint = await proxy_for()
    order = walk(endpoint, "conv-4")
    proxy._holdings("ep").record(SCOPE, chunks("conv-4", 10), order[0])
    retry = proxy.choose(endpoint, facts("conv-4", 10), {order[0]})
    assert retry.member.name != order[0]
    for name in NAMES:
        proxy.outliers.unreachable("ep", name, now=1e12)  # ejected far into the future
    assert proxy.choose(endpoint, facts("conv-4", 10), set()).member.name == order[0]


async def test_an_unseen_later_turn_goes_to_its_ring_owner_on_every_replica() -> None:
    # Two replicas: one placed the earlier turns (on a member that is not the ring owner);
    # the other has never seen the conversation. Its previous prompt (10 chunks) is longer
    # than anything the second replica knows, so it presumes the ring owner holds it.
    first, endpoint = await proxy_for()
    second, _ = await proxy_for()
    order = walk(endpoint, "conv-5")
    first._holdings("ep").record(SCOPE, chunks("conv-5", 10), order[1])
    later = facts("conv-5", 11, previous_tokens=10 * holdings.CHUNK_CHARS // 4)
    assert first.choose(endpoint, later, set()).member.name == order[1]
    unseen = second.choose(endpoint, later, set())
    assert unseen.member.name == order[0]
    assert unseen.uncached == later.prompt_tokens - later.previous_tokens


async def test_a_later_turn_whose_member_left_or_restarted_is_presumed_nowhere() -> None:
    # The previous turn went to the key's ring owner, which then left, or came back cold at a
    # new address. This replica sent it there, so it knows the history is gone: presuming it
    # on the member that now leads the walk (as for a turn another replica placed) would pile
    # every conversation of the member that left onto one member, each computing its history
    # again there. Nothing else is held, so the turn is placed as new: all of it computed.
    for change in ("leave", "restart"):
        proxy, membership = await proxy_with()
        before = membership.endpoints["ep"]
        owner = next(before.ring.walk("conv-9"))
        proxy._holdings("ep").record(SCOPE, chunks("conv-9", 10), owner.name)
        later = dataclasses.replace(
            facts("conv-9", 11, previous_tokens=10 * holdings.CHUNK_CHARS // 4), last_member=owner
        )
        home = proxy.choose(before, later, set())
        assert home.member == owner and home.uncached == later.prompt_tokens - later.previous_tokens
        members = [m for m in MEMBERS if m != owner]
        if change == "restart":
            members.append(dataclasses.replace(owner, address="127.0.0.1:9999"))
        membership.publish({"ep": EndpointConfig("ep", tuple(members))})
        placed = proxy.choose(membership.endpoints["ep"], later, set())
        assert placed.uncached == later.prompt_tokens, change
        assert not placed.moved


async def test_replicas_with_the_same_state_make_the_same_choice() -> None:
    a, endpoint = await proxy_for()
    b, _ = await proxy_for()
    for i in range(40):
        key = f"new-{i}"
        assert (
            a.choose(endpoint, facts(key, 3), set()).member.name
            == b.choose(endpoint, facts(key, 3), set()).member.name
        )


async def test_the_bound_counts_every_member_of_the_ring_also_when_some_are_tried() -> None:
    # bound = max(4, ceil(1.0 x (12 + 1) / 3)) = 5 over the whole ring (3 members), so the home
    # (6 in flight) is over it even though one member is excluded from this retry; over the
    # two remaining it would be 7, and the home would (wrongly) take a seventh request.
    proxy, endpoint = await proxy_for(load_factor=1.0)
    order = walk(endpoint, "conv-6")
    home, other, tried = order[0], order[1], order[2]
    proxy._holdings("ep").record(SCOPE, chunks("conv-6", 10), home)
    proxy.loads["ep"].update({home: 6, other: 0, tried: 6})
    placed = proxy.choose(endpoint, facts("conv-6", 10), {tried})
    assert placed.member.name == other and placed.spilled


async def test_a_home_whose_cache_cannot_have_kept_the_conversation_is_not_believed() -> None:
    import time

    from kvpin.router.loads import EngineLoad

    proxy, endpoint = await proxy_for()
    order = walk(endpoint, "conv-7")
    home = order[2]
    member = endpoint.ring.members[home]
    proxy._holdings("ep").record(SCOPE, chunks("conv-7", 10), home)
    proxy._holdings("ep").record(SCOPE, chunks("other", 10), home)
    # the engine reports room for 12 chunks (4 characters a token until measured): the other
    # conversation's 10 left room for only the first 2 of conv-7's, so it is nearly new there
    chunk_tokens = holdings.CHUNK_CHARS // 4
    proxy.engines._loads[member.url] = EngineLoad(0, 0, time.monotonic(),
                                                  capacity=12 * chunk_tokens)  # fmt: skip
    placed = proxy.choose(endpoint, facts("conv-7", 10), set())
    assert placed.member.name != home or placed.uncached > 8 * chunk_tokens
    assert proxy._holdings("ep").held(SCOPE, chunks("conv-7", 10)) == {home: 2}
    # the other conversation's prompt is still queued there (sent, no first token yet): the
    # engine has not taken blocks for it, so it evicted nothing of conv-7 so far
    queued, queued_endpoint = await proxy_for()
    queued._holdings("ep").record(SCOPE, chunks("conv-7", 10), home)
    queued.engines._loads[member.url] = EngineLoad(0, 1, time.monotonic(),
                                                   capacity=12 * chunk_tokens)  # fmt: skip
    prompt = queued.estimates.sent("ep", home, 10 * chunk_tokens)
    queued.choose(queued_endpoint, facts("other", 1), set())  # learns the capacity and queue
    queued._holdings("ep").record(SCOPE, chunks("other", 10), home)
    queued.choose(queued_endpoint, facts("conv-7", 10), set())  # (it moves: home is busy)
    assert queued._holdings("ep").held(SCOPE, chunks("conv-7", 10)) == {home: 10}
    # once it is answered (prefilled), it has
    queued.estimates.answered(prompt)
    queued.choose(queued_endpoint, facts("conv-7", 10), set())
    assert queued._holdings("ep").held(SCOPE, chunks("conv-7", 10)) == {home: 2}
    # a configured cache size wins over the engine's
    roomy, roomy_endpoint = await proxy_for(cache_tokens=1e9)
    roomy._holdings("ep").record(SCOPE, chunks("conv-7", 10), home)
    roomy._holdings("ep").record(SCOPE, chunks("other", 10), home)
    roomy.engines._loads[member.url] = EngineLoad(0, 0, time.monotonic(), capacity=chunk_tokens)
    assert roomy.choose(roomy_endpoint, facts("conv-7", 10), set()).member.name == home


async def test_on_a_saturated_pool_a_conversation_the_index_trimmed_goes_back() -> None:
    # conv-8 went to the third member of its walk (a move); the engine's reported cache (10
    # chunks) then took another conversation's 10, and the index trimmed conv-8 there. With
    # SATURATED_WAITING requests waiting on every member its next turn goes back there, where
    # its history went (router.placement); with fewer on one member it is placed as new.
    import time

    from kvpin.router.loads import EngineLoad

    proxy, endpoint = await proxy_for()
    order = walk(endpoint, "conv-8")
    home = order[2]
    proxy._holdings("ep").record(SCOPE, chunks("conv-8", 10), home)
    proxy._holdings("ep").record(SCOPE, chunks("other", 10), home)
    chunk_tokens = holdings.CHUNK_CHARS // 4
    member = endpoint.ring.members[home]
    proxy.engines._loads[member.url] = EngineLoad(0, 0, time.monotonic(),
                                                  capacity=10 * chunk_tokens)  # fmt: skip
    for name in order[1:]:
        for _ in range(placement.SATURATED_WAITING):
            proxy.estimates.sent("ep", name, 1000)
    proxy.estimates.sent("ep", order[0], 1000)
    placed = proxy.choose(endpoint, facts("conv-8", 10), set())
    assert proxy._holdings("ep").held(SCOPE, chunks("conv-8", 10)) == {}
    assert placed.member.name == order[0]  # not saturated: new, on its least loaded choice
    for _ in range(placement.SATURATED_WAITING - 1):
        proxy.estimates.sent("ep", order[0], 1000)
    placed = proxy.choose(endpoint, facts("conv-8", 10), set())
    assert placed.member.name == home and not placed.moved
    assert placed.uncached == facts("conv-8", 10).prompt_tokens - 5 * chunk_tokens


async def test_a_relaying_replica_floors_the_cap_like_a_router_alone() -> None:
    # A burst: three of five requests in flight on the home, bound ceil(1.0 x 6 / 3) = 2.
    # The floor (4) keeps the home, for one of three relaying replicas too: it decides every
    # request of its endpoint, so it counts them all (router.replicas).
    alone, endpoint = await proxy_for(load_factor=1.0)
    settings = ProxySettings(engine_metrics_interval=0, replica="http://r1:8080",
                             replicas=("http://r2:8080", "http://r3:8080"))  # fmt: skip
    relaying = Proxy(FixedMembership({"ep": endpoint.config}), settings, build_metrics())
    order = walk(endpoint, "conv-7")
    home = order[0]
    for proxy in (alone, relaying):
        proxy._holdings("ep").record(SCOPE, chunks("conv-7", 10), home)
        proxy.loads["ep"].update({home: 3, order[1]: 1, order[2]: 1})
        placed = proxy.choose(endpoint, facts("conv-7", 10), set())
        assert placed.member.name == home and not placed.spilled
    proxy.loads["ep"].update({home: 4})  # at the floor: passed over
    assert proxy.choose(endpoint, facts("conv-7", 10), set()).member.name != home


async def at_home(key: str, *, queued: int) -> tuple[Proxy, object, list[str]]:
    """A proxy whose index holds 10 chunks of `key` on the first member of its walk, with
    `queued` tokens of prefill sent there; and that walk."""
    proxy, endpoint = await proxy_for()
    order = walk(endpoint, key)
    proxy._holdings("ep").record(SCOPE, chunks(key, 10), order[0])
    proxy.estimates.sent("ep", order[0], queued)
    return proxy, endpoint, order


async def test_a_move_is_priced_by_the_requests_waiting_where_it_would_go() -> None:
    # 10 chunks (5,120 tokens) of a 5,220-token turn at home, 34,000 tokens queued there:
    # home 3.41 s; an idle member 0.52 s, ahead by more than the margin (5 x 5,120 + 256
    # tokens: 2.58 s): a move
    proxy, endpoint, order = await at_home("conv-9", queued=34_000)
    home = order[0]
    placed = proxy.choose(endpoint, facts("conv-9", 10), set())
    assert placed.moved and placed.member.name == order[1]
    # one request waiting on each of the others (their prompts held: no queued prefill):
    # the move's 5,220 tokens would delay it by 0.52 s more (1.04 > 3.41 - 2.58): stay
    for other in order[1:]:
        proxy.estimates.sent("ep", other, 0)
    placed = proxy.choose(endpoint, facts("conv-9", 10), set())
    assert placed.member.name == home and not placed.moved


async def test_a_move_is_priced_by_the_requests_arriving_while_it_recomputes() -> None:
    # the move above (an idle member at 0.52 s against home's 3.41 - 2.58) while 60 requests
    # came to the endpoint in the last instant: 60 / ARRIVALS_WINDOW_S (5 s) = 12 a second, 4
    # on each member; 2.1 of them arrive on the idle member over the move's 0.52 s of prefill
    # and wait 0.26 s each (0.52 + 0.54 > 0.83): stay. (Proxy.forward counts each request
    # once, whatever its attempts.)
    proxy, endpoint, order = await at_home("conv-9", queued=34_000)
    assert proxy.choose(endpoint, facts("conv-9", 10), set()).moved
    for _ in range(60):
        proxy.estimates.arrivals["ep"].add(time.monotonic())
    placed = proxy.choose(endpoint, facts("conv-9", 10), set())
    assert placed.member.name == order[0] and not placed.moved


async def test_on_a_saturated_pool_a_conversation_stays_with_its_history() -> None:
    # conv-9's home has 200,000 tokens of prefill queued (about 20 s): an idle member is far
    # ahead, and it moves. With SATURATED_WAITING requests waiting on every member (their
    # prompts held: no prefill queued on the others) the move would copy its history into a
    # second cache on a pool with no idle member: it stays (router.placement).
    proxy, endpoint, order = await at_home("conv-9", queued=200_000)
    home = order[0]
    for name in order:
        for _ in range(placement.SATURATED_WAITING - 1):
            proxy.estimates.sent("ep", name, 0)
    placed = proxy.choose(endpoint, facts("conv-9", 10), set())
    assert placed.moved and placed.member.name != home  # one member short of saturated
    proxy.estimates.sent("ep", order[1], 0)
    proxy.estimates.sent("ep", order[2], 0)
    placed = proxy.choose(endpoint, facts("conv-9", 10), set())
    assert placed.member.name == home and not placed.moved


async def test_a_new_conversation_passes_over_a_member_that_opened_more_than_its_share() -> None:
    # One agent of six (a head of 4 chunks, most of its first turn) is kept on one member;
    # that member opened three of the last three conversations with a head, more than its
    # share of the fourth (4/3) and one. The next new conversation copies the head to the
    # next member of the walk instead; a later turn of a conversation there still goes home.
    proxy, endpoint = await proxy_for()
    order = walk(endpoint, "agent-1")
    proxy._holdings("ep").record(SCOPE, chunks("agent-1", 4), order[0])
    head = 4 * holdings.CHUNK_CHARS // 4
    opening = dataclasses.replace(
        facts("agent-1", 4), head_tokens=head, first_tokens=head + 100, head_share=1 / 6,
        opens=True,
    )  # fmt: skip
    assert proxy.choose(endpoint, opening, set()).member.name == order[0]
    for _ in range(3):
        proxy.openings["ep"].add(order[0])
    placed = proxy.choose(endpoint, opening, set())
    assert placed.member.name == order[1] and placed.spilled and placed.uncached == head + 100
    later = dataclasses.replace(opening, opens=False)  # the same, not opening a conversation
    assert proxy.choose(endpoint, later, set()).member.name == order[0]
    for member in (order[1], order[2]) * 2:  # seven, the next the eighth: 8/3 and one each
        proxy.openings["ep"].add(member)
    assert proxy.choose(endpoint, opening, set()).member.name == order[0]


async def test_openings_are_counted_anew_when_the_pool_changes() -> None:
    # Shares of a pool that is gone: three members that opened ten each would all be full for
    # a fourth that joins, which would take every new conversation until it caught up.
    proxy, membership = await proxy_with()
    for member in NAMES * 10:
        proxy.openings["ep"].add(member)
    membership.publish({"ep": EndpointConfig("ep", MEMBERS)})  # the same pool: kept
    assert len(proxy.openings["ep"]) == 30
    joined = api.RingMember("pod-d", "127.0.0.1:9100")
    membership.publish({"ep": EndpointConfig("ep", (*MEMBERS, joined))})
    assert "ep" not in proxy.openings
