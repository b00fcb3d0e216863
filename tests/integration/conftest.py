"""Real HTTP servers on loopback for the integration tier."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from kvpin import api
from kvpin.router import app as router_app
from kvpin.router import config as router_config
from kvpin.router.membership.base import FixedMembership, Membership
from kvpin.router.outliers import OutlierSettings
from kvpin.sim import server
from kvpin.sim.config import SimConfig
from kvpin.sim.engine import Timing

StartSim = Callable[..., Awaitable[str]]
StartRouter = Callable[..., Awaitable[str]]
FAST = Timing(time_scale=0.001)


async def serve(
    app: web.Application, *, port: int = 0, **options: Any
) -> tuple[web.AppRunner, str]:
    """Serve `app` on loopback (a free port unless given); the runner and base URL."""
    options = {"handler_cancellation": True, "access_log": None, **options}
    runner = web.AppRunner(app, **options)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"


@pytest.fixture
async def start_sim() -> AsyncIterator[StartSim]:
    """Start `kvpin sim` apps in this event loop: `await start_sim(**SimConfig fields)`."""
    runners: list[web.AppRunner] = []

    async def start(**fields: Any) -> str:
        fields.setdefault("timing", FAST)
        fields.setdefault("served_model_names", ("ep-a", "sim-8b"))
        runner, url = await serve(server.make_app(SimConfig(**fields)))
        runners.append(runner)
        return url

    start.runners = runners  # type: ignore[attr-defined]
    yield start
    for runner in runners:
        await runner.cleanup()


def endpoint(endpoint_id: str, urls: list[str], **routing: Any) -> router_config.EndpointConfig:
    """An endpoint whose members are named pod-0, pod-1, ... in the order of `urls`."""
    members = tuple(
        api.RingMember(f"pod-{i}", url.removeprefix("http://")) for i, url in enumerate(urls)
    )
    return router_config.EndpointConfig(
        endpoint_id, members, router_config.RoutingConfig(**routing)
    )


@pytest.fixture
async def start_router() -> AsyncIterator[StartRouter]:
    """Start routers in this event loop over endpoints or a membership; their base URLs."""
    runners: list[web.AppRunner] = []

    async def start(
        *endpoints: router_config.EndpointConfig,
        membership: Membership | None = None,
        port: int = 0,
        **settings: Any,
    ) -> str:
        membership = membership or FixedMembership({e.id: e for e in endpoints})
        settings.setdefault("outliers", OutlierSettings(eject_seconds=30.0))
        app = router_app.make_app(membership, router_config.ProxySettings(**settings))
        runner, url = await serve(app, port=port, **router_app.RUNNER_OPTIONS)
        runners.append(runner)
        return url

    yield start
    for runner in runners:
        await runner.cleanup()


def replace_timing(**changes: Any) -> Timing:
    """FAST with some fields changed."""
    return dataclasses.replace(FAST, **changes)


async def eventually(what: str, probe: Callable[[], Awaitable[Any]], within: float = 15.0) -> Any:
    """The first truthy result of `probe`, polled for `within` seconds: a wait on an event
    that has no callback, never a fixed sleep that a loaded machine can outlast."""
    deadline = asyncio.get_running_loop().time() + within
    while not (result := await probe()):
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)
    return result
