"""Router replicas that share the endpoints (router.replicas): real routers and simulators on
loopback, a client taking the replicas in turn for every request."""

from __future__ import annotations

import aiohttp

from kvpin.router.replicas import owner_of
from tests.integration.conftest import StartRouter, StartSim, endpoint
from tests.integration.test_router_faults import free_port
from tests.integration.test_router_http import SHORT_SYSTEM, metric, pool, scrape


async def replicas(start_router: StartRouter, urls: list[str], n: int, dead: int = 0) -> list[str]:
    """`n` routers over one endpoint, each told of all (and of `dead` that never answer, one
    of which owns the endpoint: the one case worth testing)."""
    addresses = [f"http://127.0.0.1:{free_port()}" for _ in range(n + dead)]
    while dead and owner_of("ep-a", addresses) in addresses[:n]:
        addresses[-1] = f"http://127.0.0.1:{free_port()}"
    for me in addresses[:n]:
        await start_router(endpoint("ep-a", urls), port=int(me.rsplit(":", 1)[1]),
                           replica=me, replicas=tuple(addresses), break_header=True)  # fmt: skip
    return addresses[:n]


async def turn(session: aiohttp.ClientSession, router: str, messages: list) -> tuple[str, dict]:
    body = {"model": "ep-a", "messages": messages, "max_tokens": 4}
    async with session.post(f"{router}/v1/chat/completions", json=body) as r:
        assert r.status == 200, await r.text()
        return r.headers.get("X-Kvpin-Prefix-Break", ""), await r.json()


async def test_every_request_of_an_endpoint_is_decided_by_one_replica_whichever_it_reached(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    # Each turn goes to the next replica. The replica owning the endpoint decides every turn,
    # so it sees the turn before: a history rewritten at the third turn is noticed, and so is
    # a system prompt changed at the fourth, though that changes the routing key (each key
    # decided by its own replica missed it: the key's new owner never saw the turns before);
    # and every later turn finds its prefix cached.
    routers = await replicas(start_router, await pool(start_sim, 3), 3)
    reached = [0, 0, 0]
    async with aiohttp.ClientSession() as session:

        async def ask(index: int, messages: list) -> tuple[str, dict]:
            reached[index % 3] += 1
            return await turn(session, routers[index % 3], messages)

        for c in range(6):
            system = {"role": "system", "content": f"{SHORT_SYSTEM} Conversation {c}."}
            history = [system, {"role": "user", "content": f"Question {c} " * 200}]
            _, first = await ask(c, history)
            history += [first["choices"][0]["message"], {"role": "user", "content": "And?"}]
            broken, second = await ask(c + 1, history)
            assert not broken
            assert second["usage"]["prompt_tokens_details"]["cached_tokens"] >= 400, c
            history += [second["choices"][0]["message"], {"role": "user", "content": "Then?"}]
            history[2] = {"role": "assistant", "content": "something else entirely"}
            broken, third = await ask(c + 2, history)
            assert broken == "history", c
            history += [third["choices"][0]["message"], {"role": "user", "content": "Now?"}]
            history[0] = {"role": "system", "content": f"{SHORT_SYSTEM} Conversation {c}, later."}
            broken, _ = await ask(c + 3, history)
            assert broken == "system", c
        texts = [await scrape(session, r) for r in routers]
    relayed = [metric(t, "kvpin_router_relayed_total", outcome="relayed") for t in texts]
    owner = relayed.index(0)  # the one that relays nothing; the others relay all they got
    assert relayed.count(0) == 1
    assert sum(relayed) == sum(reached) - reached[owner]
    assert all(metric(t, "kvpin_router_relayed_total", outcome="unreachable") == 0 for t in texts)


async def test_a_replica_that_cannot_be_reached_is_decided_around(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    # The endpoint's owner never answers: its requests are decided where they arrive, every
    # request is answered, and the dead replica is passed over after the first failure.
    [router] = await replicas(start_router, await pool(start_sim, 2), 1, dead=1)
    async with aiohttp.ClientSession() as session:
        for c in range(12):
            await turn(session, router, [{"role": "user", "content": f"Hello {c} " * 50}])
        text = await scrape(session, router)
    assert metric(text, "kvpin_router_relayed_total", outcome="unreachable") == 1
    assert metric(text, "kvpin_router_relayed_total", outcome="relayed") == 0
