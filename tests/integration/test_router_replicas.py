"""Router replicas that share the key space (router.replicas): real routers and simulators on
loopback, a client taking the replicas in turn for every request."""

from __future__ import annotations

import aiohttp

from tests.integration.conftest import StartRouter, StartSim, endpoint
from tests.integration.test_router_faults import free_port
from tests.integration.test_router_http import SHORT_SYSTEM, metric, pool, scrape


async def replicas(start_router: StartRouter, urls: list[str], n: int, dead: int = 0) -> list[str]:
    """`n` routers over one endpoint, each told of all (and of `dead` that never answer)."""
    addresses = [f"http://127.0.0.1:{free_port()}" for _ in range(n + dead)]
    for me in addresses[:n]:
        await start_router(endpoint("ep-a", urls), port=int(me.rsplit(":", 1)[1]),
                           replica=me, replicas=tuple(addresses), break_header=True)  # fmt: skip
    return addresses[:n]


async def turn(session: aiohttp.ClientSession, router: str, messages: list) -> tuple[str, dict]:
    body = {"model": "ep-a", "messages": messages, "max_tokens": 4}
    async with session.post(f"{router}/v1/chat/completions", json=body) as r:
        assert r.status == 200, await r.text()
        return r.headers.get("X-Kvpin-Prefix-Break", ""), await r.json()


async def test_each_conversation_is_decided_by_one_replica_whichever_the_client_reached(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    # Each turn goes to the next replica. The replica owning the key decides every turn, so it
    # sees the turn before: a history rewritten at the third turn is noticed (no replica alone
    # saw the second turn without relaying), and every later turn finds its prefix cached.
    routers = await replicas(start_router, await pool(start_sim, 3), 3)
    async with aiohttp.ClientSession() as session:
        for c in range(6):
            system = {"role": "system", "content": f"{SHORT_SYSTEM} Conversation {c}."}
            history = [system, {"role": "user", "content": f"Question {c} " * 200}]
            _, first = await turn(session, routers[c % 3], history)
            history += [first["choices"][0]["message"], {"role": "user", "content": "And?"}]
            broken, second = await turn(session, routers[(c + 1) % 3], history)
            assert not broken
            assert second["usage"]["prompt_tokens_details"]["cached_tokens"] >= 400, c
            history += [second["choices"][0]["message"], {"role": "user", "content": "Then?"}]
            history[2] = {"role": "assistant", "content": "something else entirely"}
            broken, _ = await turn(session, routers[(c + 2) % 3], history)
            assert broken == "history", c
        texts = [await scrape(session, r) for r in routers]
    relayed = [metric(t, "kvpin_router_relayed_total", outcome="relayed") for t in texts]
    assert sum(relayed) >= 6 and sum(r > 0 for r in relayed) >= 2  # every replica relays some
    assert all(metric(t, "kvpin_router_relayed_total", outcome="unreachable") == 0 for t in texts)


async def test_a_replica_that_cannot_be_reached_is_decided_around(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    # One listed replica never answers: the keys it owns are decided where they arrive, every
    # request is answered, and the dead replica is passed over after the first failure.
    [router] = await replicas(start_router, await pool(start_sim, 2), 1, dead=1)
    async with aiohttp.ClientSession() as session:
        for c in range(12):
            await turn(session, router, [{"role": "user", "content": f"Hello {c} " * 50}])
        text = await scrape(session, router)
    assert metric(text, "kvpin_router_relayed_total", outcome="unreachable") == 1
    assert metric(text, "kvpin_router_relayed_total", outcome="relayed") == 0
