"""`kvpin router --kubernetes` when the API server misbehaves: the watch never dies.

The real API server cannot be made to stall, reset or answer garbage on cue, so a stand-in
aiohttp server on loopback plays it here, serving the CachedEndpoint list and watch paths the
way the API server does; the control-plane tier runs the same code against the real one.
"""

from __future__ import annotations

import asyncio
import itertools

import kubernetes.client
import prometheus_client
import pytest
from aiohttp import web

from kvpin import api
from kvpin.router.membership import kubernetes as membership
from kvpin.router.metrics import build_metrics
from tests.integration.conftest import serve
from tests.integration.test_router_http import metric

PATH = f"/apis/{api.GROUP}/{api.VERSION}/{api.PLURAL}"
CEP = {
    "apiVersion": f"{api.GROUP}/{api.VERSION}", "kind": "CachedEndpoint",
    "metadata": {"name": "ep-a", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"},
    "spec": {}, "status": {"ring": {"members": [{"name": "ep-a-0", "address": "10.0.0.1:8000"}]}},
}  # fmt: skip


class StandInApiServer:
    """Answers lists by a script of faults, then with CEP; watches end after a moment."""

    def __init__(self, faults: list[str]) -> None:
        self.faults = iter(faults)
        self.lists = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch"):
            await asyncio.sleep(0.2)
            return web.Response(text="")
        self.lists += 1
        fault = next(self.faults, "ok")
        if fault == "reset":
            assert request.transport is not None
            request.transport.abort()
        elif fault == "stall":
            await asyncio.sleep(30)
        elif fault == "garbage":
            return web.Response(status=200, text="<html>not json", content_type="text/html")
        elif fault == "500":
            return web.Response(status=500, text="etcd is down")
        return web.json_response(
            {"apiVersion": "v1", "kind": "List", "items": [CEP],
             "metadata": {"resourceVersion": str(self.lists)}}
        )  # fmt: skip


async def start(faults: list[str]) -> tuple[web.AppRunner, str, StandInApiServer]:
    stand_in = StandInApiServer(faults)
    app = web.Application()
    app.router.add_get(PATH, stand_in.handle)
    runner, url = await serve(app)
    return runner, url, stand_in


def client_for(url: str) -> kubernetes.client.ApiClient:
    configuration = kubernetes.client.Configuration()
    configuration.host = url
    return kubernetes.client.ApiClient(configuration)


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(membership, "RETRY_SECONDS", 0.1)
    monkeypatch.setattr(membership, "RETRY_MAX", 0.4)


async def test_the_watch_survives_resets_stalls_garbage_and_errors() -> None:
    runner, url, stand_in = await start(["reset", "stall", "garbage", "500", "reset"])
    follower = membership.KubernetesMembership(client=lambda: client_for(url), watch_seconds=1)
    follower.metrics = build_metrics()
    try:
        async with asyncio.timeout(20):
            await follower.start()  # waits for the first good list
        assert [m.name for m in follower.endpoints["ep-a"].config.members] == ["ep-a-0"]
        # every fault was met (urllib3 retries some on its own); those that surfaced are counted
        assert stand_in.lists >= 6
        text = prometheus_client.generate_latest(follower.metrics.registry).decode()
        assert metric(text, "kvpin_router_membership_errors_total", source="kubernetes") >= 2
        lists = stand_in.lists
        await asyncio.sleep(1.0)
        assert stand_in.lists > lists  # still following: relisting after each watch
        assert follower.stale() is None
    finally:
        await follower.stop()
        await runner.cleanup()


async def test_a_vanished_api_server_makes_the_router_unready_but_keeps_its_rings() -> None:
    runner, url, _ = await start(["ok", *itertools.repeat("reset", 1000)])
    follower = membership.KubernetesMembership(
        client=lambda: client_for(url), watch_seconds=1, stale_seconds=0.5
    )
    try:
        await follower.start()
        for _ in range(50):
            if follower.stale():
                break
            await asyncio.sleep(0.1)
        assert "not read for" in (follower.stale() or "")
        assert "ep-a" in follower.endpoints  # the last good membership is still served
    finally:
        await follower.stop()
        await runner.cleanup()
