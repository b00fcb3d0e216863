"""Router replicas that read the same engines agree on where a new conversation goes.

Real `kvpin sim` engines and real routers on loopback, each router reading the engines' own
`/metrics` (the other agreement tests in test_router_http turn those reads off). Each replica
also keeps what only it saw: its own placement index, estimates and counts. The tests wait
for the routers' reads through the proxy object itself, since nothing on the wire says a read
came back.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from kvpin.api import RingMember
from kvpin.router import app as router_app
from kvpin.router.config import ProxySettings
from kvpin.router.membership.base import FixedMembership
from kvpin.router.proxy import Proxy
from tests.integration.conftest import StartSim, endpoint, eventually, serve
from tests.integration.test_router_http import chat, pool

StartRouter = Callable[[list[str]], Awaitable[tuple[str, Proxy]]]


def members(proxy: Proxy) -> tuple[RingMember, ...]:
    return proxy.membership.endpoints["ep-a"].config.members


async def settle(proxy: Proxy) -> None:
    """Wait until `proxy` has read every engine after this moment, with nothing running."""
    since = time.monotonic()

    async def read() -> bool:
        loads = [proxy.engines.get(m.url, time.monotonic()) for m in members(proxy)]
        return all(
            load is not None and load.at > since and load.waiting + load.running == 0
            for load in loads
        )

    await eventually("a read of every engine after the last answer", read)


@pytest.fixture
async def start_router() -> AsyncIterator[StartRouter]:
    """Routers over one endpoint `ep-a` of `urls` that read the engines' metrics often; their
    base URLs and proxies."""
    runners: list[web.AppRunner] = []

    async def start(urls: list[str]) -> tuple[str, Proxy]:
        membership = FixedMembership({"ep-a": endpoint("ep-a", urls)})
        app = router_app.make_app(membership, ProxySettings(engine_metrics_interval=0.02))
        runner, url = await serve(app, **router_app.RUNNER_OPTIONS)
        runners.append(runner)
        return url, app[router_app.PROXY]

    yield start
    for runner in runners:
        await runner.cleanup()


def opening(i: int) -> list[dict[str, str]]:
    """The first turn of conversation `i`: new content of one size for every conversation."""
    return [{"role": "user", "content": f"conversation {i:03d}: " + "tell me more. " * 150}]


async def test_replicas_reading_the_same_engines_place_a_new_conversation_alike(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    # Between conversations, one replica alone sends another one, which the others see only
    # through the engines. Then a new conversation reaches all three at once (a client
    # retrying through a Service might do that), after each has read the engines: all three
    # choose the same member, and the conversations do not all go to one member.
    urls = await pool(start_sim, 4)
    replicas = [await start_router(urls) for _ in range(3)]
    served: collections.Counter[str] = collections.Counter()
    async with aiohttp.ClientSession() as session:
        for i in range(12):
            await chat(session, replicas[i % 3][0], opening(100 + i))
            for _, proxy in replicas:
                await settle(proxy)
            chosen = await asyncio.gather(
                *(chat(session, router, opening(i)) for router, _ in replicas)
            )
            assert len({member for member, _ in chosen}) == 1, (i, chosen)
            served[chosen[0][0]] += 1
    assert len(served) >= 2, served  # not one member for all: an agreement worth checking
