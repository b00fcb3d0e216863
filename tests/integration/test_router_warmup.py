"""Warm-up of joining members (router.warmup) over real HTTP: `kvpin sim` pools on loopback,
membership changed by publishing a new snapshot as the file and Kubernetes sources do."""

from __future__ import annotations

import aiohttp

from kvpin.router.config import parse_warmup
from kvpin.router.membership.base import FixedMembership
from tests.integration.conftest import StartRouter, StartSim, endpoint, eventually, replace_timing
from tests.integration.test_router_http import LONG_SYSTEM, chat, metric, pool, scrape

HOT = LONG_SYSTEM * 4  # ~11,500 characters, ~2,900 tokens: what every conversation starts with
CONFIGURED = "You answer questions about the warranty terms below. " * 200


async def warmups(session: aiohttp.ClientSession, router: str, outcome: str) -> float:
    return metric(await scrape(session, router), "kvpin_router_warmups_total", outcome=outcome)


async def held(session: aiohttp.ClientSession, sim: str, system: str) -> int:
    """Tokens of [system, a user turn] the sim holds (its exact debug view)."""
    body = {"model": "ep-a", "messages": [{"role": "system", "content": system},
                                          {"role": "user", "content": "anything"}]}  # fmt: skip
    async with session.post(f"{sim}/debug/cached_tokens", json=body) as r:
        return (await r.json())["cached_tokens"]


async def test_a_joining_member_is_warmed_before_it_takes_new_keys(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    urls = await pool(start_sim, 3)
    # the newcomer computes 2,000 tokens a second: warming it takes a few seconds
    new = await start_sim(timing=replace_timing(prefill_tokens_per_s=2000, time_scale=1.0),
                          debug_routes=True)  # fmt: skip
    warmup = parse_warmup({"prompts": [{"messages": [{"role": "system", "content": CONFIGURED}]}]},
                          "test")  # fmt: skip
    # keyed by session: each conversation walks the ring from its own point
    ep = {"warmup": warmup, "key": "session"}
    membership = FixedMembership({"ep-a": endpoint("ep-a", urls, **ep)})
    router = await start_router(membership=membership)
    system = {"role": "system", "content": HOT}
    async with aiohttp.ClientSession() as session:
        for i in range(4):
            session.headers["X-Session-ID"] = f"before-{i}"
            await chat(session, router, [system, {"role": "user", "content": f"before {i}"}])
        warmed = await warmups(session, router, "warm")  # the first members, at start
        membership.publish({"ep-a": endpoint("ep-a", [*urls, new], **ep)})
        during = []
        for i in range(12):
            session.headers["X-Session-ID"] = f"during-{i}"
            # nothing of these is cached anywhere: without warm-up they would spread to it
            question = {"role": "user", "content": f"a new question {i}"}
            during.append((await chat(session, router, [question]))[0])
        assert await warmups(session, router, "warm") == warmed  # sent while it warmed
        assert "pod-3" not in during

        async def done() -> bool:
            return await warmups(session, router, "warm") > warmed

        await eventually("the warm-up", done, within=30)
        assert await held(session, new, HOT) > 2500  # the hot head, from what the router saw
        assert await held(session, new, CONFIGURED) > 2000  # the configured prompt
        text = await scrape(session, router)
        # the configured prompt to each of the four, the hot head to the newcomer only
        assert metric(text, "kvpin_router_warmup_requests_total", outcome="ok") == 5
        assert metric(text, "kvpin_router_requests_total", member="pod-3") == 0  # not user traffic
        async with session.get(f"{new}/debug/arrivals") as r:
            assert await r.json() == ["warmup", "warmup"]  # marked as such for the engine

        # new conversations now reach it, and find their head already computed there
        for i in range(40):
            session.headers["X-Session-ID"] = f"after-{i}"
            question = {"role": "user", "content": f"after {i}"}
            member, body = await chat(session, router, [system, question])
            if member == "pod-3":
                assert body["usage"]["prompt_tokens_details"]["cached_tokens"] > 2500
                break
        else:
            raise AssertionError("no new conversation reached the warmed member")


async def test_a_member_that_cannot_be_warmed_in_time_joins_anyway(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    urls = await pool(start_sim, 2)
    crawling = await start_sim(timing=replace_timing(prefill_tokens_per_s=1000, time_scale=1.0))
    warmup = parse_warmup({"timeoutSeconds": 0.1}, "test")  # its head takes ~0.7 s there
    membership = FixedMembership({"ep-a": endpoint("ep-a", urls, warmup=warmup)})
    router = await start_router(membership=membership)
    system = {"role": "system", "content": LONG_SYSTEM}
    async with aiohttp.ClientSession() as session:
        await chat(session, router, [system, {"role": "user", "content": "hello"}])
        membership.publish({"ep-a": endpoint("ep-a", [*urls, crawling], warmup=warmup)})
        await eventually("the warm-up to give up", lambda: warmups(session, router, "timeout"))
        # it takes new keys now (once its engine has dropped the abandoned warm-up request)
        served: set[str] = set()

        async def reached() -> bool:
            body = {"model": "ep-a", "max_tokens": 1,
                    "messages": [{"role": "user", "content": f"short {len(served)}"}]}  # fmt: skip
            async with session.post(f"{router}/v1/chat/completions", json=body) as r:
                assert r.status == 200
                served.add(r.headers["X-Kvpin-Member"])
            return "pod-2" in served

        await eventually("a request placed on the member", reached)


async def test_live_conversations_stay_home_when_a_member_joins(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    urls = await pool(start_sim, 5)
    for keep_homes in (True, False):
        ep = {"key": "session", "keep_homes": keep_homes}
        membership = FixedMembership({"ep-a": endpoint("ep-a", urls[:4], **ep)})
        router = await start_router(membership=membership)
        homes, moved = {}, set()
        async with aiohttp.ClientSession() as session:
            histories = {c: [{"role": "user", "content": f"{c} " + LONG_SYSTEM * 3}]
                         for c in range(16)}  # fmt: skip
            for turn in range(3):
                if turn == 2:
                    membership.publish({"ep-a": endpoint("ep-a", urls, **ep)})
                for c, history in histories.items():
                    session.headers["X-Session-ID"] = f"{keep_homes}-{c}"
                    member, _ = await chat(session, router, history)
                    moved |= {c} if homes.setdefault(c, member) != member else set()
                    history += [{"role": "assistant", "content": "ok"},
                                {"role": "user", "content": f"turn {turn}"}]  # fmt: skip
        # with homes kept nobody leaves; without, the keys the newcomer took move to it
        assert bool(moved) is not keep_homes
