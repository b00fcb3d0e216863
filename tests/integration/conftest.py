"""Real HTTP servers on loopback for the integration tier."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from kvpin.sim import server
from kvpin.sim.config import SimConfig
from kvpin.sim.engine import Timing

StartSim = Callable[..., Awaitable[str]]
FAST = Timing(time_scale=0.001)


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    """Serve `app` on a free loopback port; the runner and base URL."""
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"


@pytest.fixture
async def start_sim() -> AsyncIterator[StartSim]:
    """Start `kvpin sim` apps in this event loop: `await start_sim(**SimConfig fields)`."""
    runners: list[web.AppRunner] = []

    async def start(**fields: Any) -> str:
        fields.setdefault("timing", FAST)
        runner, url = await serve(server.make_app(SimConfig(**fields)))
        runners.append(runner)
        return url

    yield start
    for runner in runners:
        await runner.cleanup()


def replace_timing(**changes: Any) -> Timing:
    """FAST with some fields changed."""
    return dataclasses.replace(FAST, **changes)
