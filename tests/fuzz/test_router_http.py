"""Property-based fuzzing of the router over real HTTP: whatever path, body and headers a
client sends, the answer is JSON (from the router or relayed from a real `kvpin sim`), never a
5xx of the router's own making, and in-flight counts go back to zero.

Hypothesis drives synchronous tests, so the router and the simulator run on an event loop in a
background thread for the whole module.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvpin.router import app as router_app
from kvpin.router import config
from kvpin.router.membership.base import FixedMembership
from kvpin.sim import server
from kvpin.sim.config import SimConfig
from tests.integration.conftest import FAST, endpoint, serve
from tests.integration.test_router_http import metric


class Servers:
    """A sim and a router on a loop of their own, and a way to run coroutines there."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.runners: list[Any] = []

    def run(self, coro: Any, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def start(self) -> None:
        sim_app = server.make_app(SimConfig(timing=FAST, served_model_names=("ep-a",)))
        runner, sim = await serve(sim_app)
        self.runners.append(runner)
        settings = config.ProxySettings(max_body_bytes=64 * 1024)
        membership = FixedMembership({"ep-a": endpoint("ep-a", [sim])})
        runner, self.router = await serve(
            router_app.make_app(membership, settings), **router_app.RUNNER_OPTIONS
        )
        self.runners.append(runner)
        self.session = aiohttp.ClientSession(auto_decompress=False)

    async def stop(self) -> None:
        await self.session.close()
        for runner in self.runners:
            await runner.cleanup()


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    s = Servers()
    s.run(s.start())
    yield s
    s.run(s.stop())
    s.loop.call_soon_threadsafe(s.loop.stop)


printable = st.characters(min_codepoint=33, max_codepoint=126)
paths = st.sampled_from(
    ["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models", "/metrics",
     "/v1/../reset_prefix_cache", "/v1/chat/completions/", "/v1//completions", "/"]
) | st.text(printable, max_size=40).map("/".__add__)  # fmt: skip
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
message = st.fixed_dictionaries({"role": st.sampled_from(["user", "system"]) | json_values},
                                optional={"content": st.text() | json_values})  # fmt: skip
chat = st.fixed_dictionaries(
    {"model": st.sampled_from(["ep-a", "ep-b", ""]) | json_values},
    optional={"messages": st.lists(message, max_size=5) | json_values, "prompt": json_values,
              "max_tokens": st.integers(-2, 8) | json_values, "stream": json_values,
              "user": json_values, "cache_salt": json_values},
)  # fmt: skip
raw_bodies = chat.map(lambda b: json.dumps(b).encode()) | st.binary(max_size=200)
header_values = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=30)
extra_headers = st.dictionaries(
    st.sampled_from(["Content-Encoding", "Connection", "Expect", "X-Session-ID", "Authorization",
                     "Content-Type", "Accept-Encoding", "X-Forwarded-For", "TE"]),
    header_values, max_size=4,
)  # fmt: skip


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(paths, raw_bodies, extra_headers, st.sampled_from(["POST", "GET"]))
def test_every_answer_is_json_and_nothing_leaks(
    servers: Servers, path: str, body: bytes, headers: dict[str, str], method: str
) -> None:
    async def send() -> tuple[int, str, bytes]:
        try:
            async with servers.session.request(
                method, servers.router + path, data=body, headers=headers,
                timeout=aiohttp.ClientTimeout(total=10),
            ) as r:  # fmt: skip
                return r.status, r.content_type, await r.read()
        except aiohttp.ClientResponseError as err:  # the client refused the router's answer
            return err.status, "", b""
        except (aiohttp.InvalidURL, ValueError):
            return 0, "", b""  # the client refused to send it

    status, content_type, answer = servers.run(send())
    if status == 0 or path in ("/metrics",) or (path == "/v1/models" and method == "GET"):
        return
    if status >= 400:
        assert content_type == "application/json", (status, answer[:200])
        assert "error" in json.loads(answer)
        assert status < 500 or b"simulated" in answer or status == 502, answer[:200]


def test_in_flight_is_zero_after_the_fuzzing(servers: Servers) -> None:
    async def scrape() -> str:
        async with servers.session.get(f"{servers.router}/metrics") as r:
            return await r.text()

    assert metric(servers.run(scrape()), "kvpin_router_in_flight") == 0
