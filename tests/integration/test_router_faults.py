"""The router under hostile input and faults: each reproduction of issue 11 as a test.

Real router and `kvpin sim` instances on loopback; where a fault needs an engine or a client that
is broken on purpose, tests.integration.upstreams provides one (and says so).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import pathlib
import socket
import time

import aiohttp
import pytest
from aiohttp import web

from kvpin.router import app as router_app
from kvpin.router import auth, bodies, keys, ring
from kvpin.router.config import ParseSettings, ProxySettings, Timeouts
from kvpin.router.estimates import ARRIVALS_WINDOW_S
from kvpin.router.membership.base import FixedMembership
from kvpin.router.membership.static import StaticMembership
from kvpin.router.outliers import OutlierSettings
from kvpin.sim import server
from kvpin.sim.config import SimConfig
from tests.integration import upstreams
from tests.integration.conftest import (
    FAST,
    StartRouter,
    StartSim,
    endpoint,
    eventually,
    replace_timing,
    serve,
)
from tests.integration.test_router_http import chat, metric, scrape

SYSTEM = "You are the support agent of a large online shop; be precise and kind. " * 20


@pytest.fixture
async def start_upstream():
    runners: list[web.AppRunner] = []

    async def start(behaviour: str) -> str:
        runner, url = await serve(upstreams.engine(behaviour))
        runners.append(runner)
        return url

    yield start
    for runner in runners:
        await runner.cleanup()


async def cached_tokens(session: aiohttp.ClientSession, router: str) -> int:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}]
    _, body = await chat(session, router, messages)
    return body["usage"]["prompt_tokens_details"]["cached_tokens"]


async def in_flight(session: aiohttp.ClientSession, router: str) -> float:
    return metric(await scrape(session, router), "kvpin_router_in_flight")


async def settled(session: aiohttp.ClientSession, router: str) -> float:
    """The total in-flight gauge once the router has finished what it was doing (zero, or
    a failure naming what was left)."""

    async def idle() -> bool:
        return await in_flight(session, router) == 0

    await eventually("no request in flight", idle)
    return 0


@pytest.mark.parametrize(
    "path",
    [
        "/v1/..%2Freset_prefix_cache",
        "/v1/../reset_prefix_cache",
        "/v1/%2e%2e/reset_prefix_cache",
        "/v1/chat/completions%3F/../../reset_prefix_cache",
        "/reset_prefix_cache",
        "/v1/chat/completions/../../reset_prefix_cache",
    ],
)
async def test_engine_admin_routes_are_out_of_reach(
    start_sim: StartSim, start_router: StartRouter, path: str
) -> None:
    router = await start_router(endpoint("ep-a", [await start_sim()]))
    async with aiohttp.ClientSession() as session:
        await cached_tokens(session, router)
        assert await cached_tokens(session, router) > 100
        answer = await upstreams.raw_request(
            router, upstreams.http_post(path, b'{"model": "ep-a"}')
        )
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.split()[1] in (b"404", b"405")
        assert "error" in json.loads(body)
        assert await cached_tokens(session, router) > 100  # the cache was not flushed


async def test_only_the_matched_route_reaches_the_member(
    start_upstream, start_router: StartRouter
) -> None:
    router = await start_router(endpoint("ep-a", [await start_upstream("ok")]))
    async with aiohttp.ClientSession() as session:
        body = {"model": "ep-a", "messages": [{"role": "user", "content": "x"}]}
        async with session.post(f"{router}/v1/chat/completions?x=1", json=body) as r:
            assert (await r.json())["path"] == "/v1/chat/completions"
        async with session.get(f"{router}/v1/chat/completions") as r:
            assert r.status == 405
            assert (await r.json())["error"]["code"] == "method_not_allowed"


async def test_a_client_that_gives_up_before_the_first_byte_leaves_no_load(
    start_sim: StartSim,
) -> None:
    slow = replace_timing(prefill_tokens_per_s=400, time_scale=1.0)  # ~0.5 s per request
    urls = [await start_sim(timing=slow), await start_sim(timing=slow)]
    # local accounting only: the engines' own metrics would (rightly) show abandoned work
    membership = FixedMembership({"ep-a": endpoint("ep-a", urls, key="endpoint")})
    app = router_app.make_app(membership, ProxySettings(engine_metrics_interval=0))
    runner, router = await serve(app, **router_app.RUNNER_OPTIONS)
    try:
        async with aiohttp.ClientSession() as session:
            messages = [{"role": "user", "content": "a question " * 100}]
            home, _ = await chat(session, router, messages)
            for i in range(3):  # new prompts: nothing cached, each takes ~0.5 s
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(0.1):
                        await chat(session, router, [{"role": "user", "content": f"{i} " * 200}])
            assert await settled(session, router) == 0
            # with no phantom load left behind, the endpoint's key still goes home
            assert (await chat(session, router, messages))[0] == home
        # nor prefill the router still counts as queued on a member (it would push placement
        # off that member for good)
        estimates = app[router_app.PROXY].estimates
        assert sum(estimates.pending.values()) == 0 and sum(estimates.waiting.values()) == 0
    finally:
        await runner.cleanup()


async def test_the_break_detector_keeps_a_fixed_size_per_conversation() -> None:
    many = {"model": "ep-a", "messages": [{"role": "user", "content": "x"}] * 5000}
    summary = bodies.summarize(json.dumps(many).encode(), bodies.Limits())
    assert len(summary.turn.record()) == 48


async def test_bodies_that_would_block_the_loop_are_parsed_elsewhere(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    router = await start_router(
        endpoint("ep-a", [await start_sim()]),
        parse=ParseSettings(workers=1, limits=bodies.Limits(max_messages=150_000)),
    )
    tiny = {"model": "ep-a", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]}
    huge = {**tiny, "messages": [{"role": "user", "content": "x"}] * 200_000}
    raw = json.dumps(huge).encode()
    assert raw.count(b"{") > ParseSettings().inline_objects
    async with aiohttp.ClientSession() as session:
        task = asyncio.ensure_future(session.post(f"{router}/v1/chat/completions", data=raw))
        answered = 0
        while not task.done():  # the loop keeps answering while the body is parsed
            async with session.get(f"{router}/healthz") as r:
                answered += r.status == 200
            await asyncio.sleep(0.01)
        response = await task
        assert response.status == 400  # parsed (elsewhere) and refused: over the limit
        assert "more than 150000 messages" in (await response.json())["error"]["message"]
        assert answered > 0


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"model": "ep-a", "messages": [{"role": "\\ud800", "content": "x"}]}', "surrogate"),
        (b'{"model": "ep-a", "max_tokens": ' + b"9" * 5000 + b"}", "not valid JSON"),
        (b'{"model": "ep-a", "x": ' + b"[" * 1000 + b"]" * 1000 + b"}", "nested"),
        (b'{"model": "ep-a", "x": ' + b"[" * 2000 + b"]" * 2000 + b"}", "not valid JSON"),
        (b'{"model": "ep-a", "messages": {"role": "user"}}', "must be a list"),
        (b'{"model": "ep-a", "messages": [{"role": 1, "content": "x"}]}', "role must be"),
        (b'{"model": "ep-a", "messages": [{"role": "user", "content": 5}]}', "content must be"),
        (b'{"model": "ep-a", "messages": [{"role": "user", "content": [1]}]}', "parts must be"),
        (b'{"model": "ep-a", "prompt": "x", "user": 5}', "`user` must be"),
        (b'{"model": ["ep-a"], "prompt": "x"}', "`model` is required"),
    ],
)
async def test_malformed_bodies_get_a_json_400(
    start_sim: StartSim, start_router: StartRouter, body: bytes, message: str
) -> None:
    router = await start_router(endpoint("ep-a", [await start_sim()]))
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{router}/v1/chat/completions", data=body) as r,
    ):
        assert r.status == 400
        assert message in (await r.json())["error"]["message"]


async def test_a_body_labelled_gzip_that_is_not_gets_a_json_400(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    router = await start_router(endpoint("ep-a", [await start_sim()]))
    body = json.dumps({"model": "ep-a", "prompt": "x", "max_tokens": 1}).encode()
    async with aiohttp.ClientSession() as session:
        headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
        async with session.post(f"{router}/v1/completions", data=body, headers=headers) as r:
            assert r.status == 400
            assert "error" in await r.json()
        async with session.post(
            f"{router}/v1/completions", data=gzip.compress(body), headers=headers
        ) as r:
            assert r.status == 200  # real gzip is decoded and forwarded plain
        bomb = gzip.compress(b" " * (64 * upstreams.MiB))
        async with session.post(f"{router}/v1/completions", data=bomb, headers=headers) as r:
            assert r.status == 413


@pytest.mark.parametrize("behaviour", ["stalled-500", "huge-500", "reset-500"])
async def test_a_broken_error_answer_becomes_the_routers_own_error(
    start_upstream, start_router: StartRouter, behaviour: str
) -> None:
    router = await start_router(
        endpoint("ep-a", [await start_upstream(behaviour), await start_upstream(behaviour)]),
        timeouts=Timeouts(error_body=0.3),
        max_error_body_bytes=4096,
        max_attempts=2,
    )
    body = {"model": "ep-a", "messages": [{"role": "user", "content": "x"}]}
    async with aiohttp.ClientSession() as session:
        async with asyncio.timeout(5):
            async with session.post(f"{router}/v1/chat/completions", json=body) as r:
                assert r.status >= 500
                if behaviour != "stalled-500":  # the last member's answer is relayed as it
                    return  # comes (streamed, with the idle timeout): no buffering, no cap
        assert await settled(session, router) == 0


async def test_the_first_error_answer_is_read_with_a_cap_and_a_deadline(
    start_upstream, start_router: StartRouter
) -> None:
    for behaviour in ("stalled-500", "huge-500", "reset-500"):
        bad = await start_upstream(behaviour)
        router = await start_router(
            endpoint("ep-a", [bad]), endpoint("ep-b", [bad]),
            timeouts=Timeouts(error_body=0.3), max_error_body_bytes=4096, max_attempts=2,
        )  # fmt: skip
        body = {"model": "ep-a", "messages": [{"role": "user", "content": "x"}]}
        async with aiohttp.ClientSession() as session:
            async with asyncio.timeout(5):
                # one member: the 5xx is read as a retry candidate, then relayed or replaced
                async with session.post(f"{router}/v1/chat/completions", json=body) as r:
                    text = await r.read()
            assert r.status == 500, behaviour
            assert len(text) < 2 * upstreams.MiB, behaviour
            assert await settled(session, router) == 0


async def test_a_request_every_engine_fails_on_ejects_nobody(
    start_upstream, start_router: StartRouter
) -> None:
    urls = [await start_upstream("ok") for _ in range(3)]
    router = await start_router(endpoint("ep-a", urls), outliers=OutlierSettings(consecutive=2))
    async with aiohttp.ClientSession() as session:
        poison = {"model": "ep-a", "messages": [{"role": "user", "content": "poison"}]}
        for _ in range(6):
            async with session.post(f"{router}/v1/chat/completions", json=poison) as r:
                assert r.status == 500
        text = await scrape(session, router)
        assert metric(text, "kvpin_router_ejections_total") == 0
        members = set()
        for i in range(20):
            member, _ = await chat(session, router, [{"role": "user", "content": f"c{i}"}])
            members.add(member)
    assert members == {"pod-0", "pod-1", "pod-2"}


async def test_a_member_that_keeps_failing_is_ejected(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    from kvpin.sim.config import Faults

    broken = await start_sim(faults=Faults(error_rate=1.0))
    router = await start_router(
        endpoint("ep-a", [broken, await start_sim()]),
        outliers=OutlierSettings(consecutive=2, eject_seconds=60),
    )
    async with aiohttp.ClientSession() as session:
        for i in range(16):
            member, _ = await chat(session, router, [{"role": "user", "content": f"q{i}"}])
            assert member == "pod-1"
        text = await scrape(session, router)
    assert metric(text, "kvpin_router_ejections_total", member="pod-0") == 1
    assert metric(text, "kvpin_router_retries_total") == 2  # ejected after two failures


async def test_a_slow_body_is_cut_with_a_json_408(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    router = await start_router(
        endpoint("ep-a", [await start_sim()]), timeouts=Timeouts(client_body=0.3)
    )
    head = upstreams.http_post("/v1/completions", b"")
    head = head.replace(b"Content-Length: 0", b"Content-Length: 100") + b"{"
    async with asyncio.timeout(5):
        answer = await upstreams.raw_request(router, head)
    status_line, _, body = answer.partition(b"\r\n\r\n")
    assert status_line.split()[1] == b"408"
    assert json.loads(body)["error"]["code"] == "request_timeout"


async def test_a_client_that_stops_reading_is_cut_and_leaves_no_load(
    start_upstream, start_router: StartRouter
) -> None:
    router = await start_router(
        endpoint("ep-a", [await start_upstream("endless")]), timeouts=Timeouts(client_write=0.3)
    )
    body = json.dumps({"model": "ep-a", "messages": [{"role": "user", "content": "x"}]})
    host, port = router.removeprefix("http://").split(":")
    _, writer = await asyncio.open_connection(host, int(port))  # and never read
    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    writer.write(upstreams.http_post("/v1/chat/completions", body.encode()))
    await writer.drain()
    async with aiohttp.ClientSession() as session:

        async def cut() -> float:
            text = await scrape(session, router)
            return metric(text, "kvpin_router_errors_total", reason="client_stalled")

        assert await eventually("the stalled client to be cut", cut) == 1
        assert await settled(session, router) == 0
    writer.close()


async def test_headers_follow_rfc_9110(start_upstream, start_router: StartRouter) -> None:
    router = await start_router(endpoint("ep-a", [await start_upstream("ok")]))
    body = json.dumps({"model": "ep-a", "messages": [{"role": "user", "content": "x"}]})
    raw = upstreams.http_post(
        "/v1/chat/completions", body.encode(), X_Secret_Hop="1", X_Kept="2",
        X_Forwarded_For="203.0.113.9", Accept_Encoding="gzip", Expect="100-continue",
    ).replace(b"Connection: close", b"Connection: close, X-Secret-Hop")  # fmt: skip
    answer = await upstreams.raw_request(router, raw)
    _, _, response = answer.partition(b"\r\n\r\n")
    seen = {k.lower(): v for k, v in json.loads(response)["headers"].items()}
    assert "x-secret-hop" not in seen and "expect" not in seen
    assert seen["x-kept"] == "2"
    assert seen["x-forwarded-for"] == "203.0.113.9, 127.0.0.1"
    assert seen["x-forwarded-proto"] == "http"
    assert seen["accept-encoding"] == "identity"


async def test_errors_never_name_internal_addresses(start_router: StartRouter) -> None:
    dead = endpoint("ep-a", ["http://127.0.0.1:9", "http://127.0.0.1:19"])
    router = await start_router(dead)
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{router}/v1/completions", json={"model": "ep-a"}) as r,
    ):
        assert r.status == 502
        assert "127.0.0.1" not in await r.text()


async def test_metrics_can_ask_for_a_token(start_sim: StartSim, start_router: StartRouter) -> None:
    router = await start_router(
        endpoint("ep-a", [await start_sim()]), tokens=auth.parse_tokens("t0k"), metrics_auth=True
    )
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{router}/metrics") as r:
            assert r.status == 401
        async with session.get(f"{router}/metrics", headers={"Authorization": "Bearer t0k"}) as r:
            assert r.status == 200


async def test_series_and_state_of_departed_members_are_removed(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    urls = [await start_sim(), await start_sim()]
    membership = FixedMembership({"ep-a": endpoint("ep-a", urls), "ep-b": endpoint("ep-b", urls)})
    router = await start_router(membership=membership)
    async with aiohttp.ClientSession() as session:
        for i in range(10):
            await chat(session, router, [{"role": "user", "content": f"c{i}"}])
        assert 'member="pod-1"' in await scrape(session, router)
        membership.publish({"ep-a": endpoint("ep-a", urls[:1])})
        text = await scrape(session, router)
    assert 'member="pod-1"' not in text
    assert 'endpoint="ep-b"' not in text


async def test_the_reload_loop_survives_unusable_files(
    start_sim: StartSim, start_router: StartRouter, tmp_path: pathlib.Path
) -> None:
    urls = [await start_sim(), await start_sim()]
    path = tmp_path / "router.yaml"
    path.write_text(f"endpoints: {{ep-a: {{members: [{urls[0]}]}}}}")
    membership = StaticMembership(path, interval=0.05)
    router = await start_router(membership=membership)
    bad_files = [
        b"endpoints: {ep-a: {members: [\xff\xfe]}}",  # not UTF-8
        b"endpoints: {ep-a: {members: ['http://[::1']}}",  # not a URL
        b"endpoints: {ep-a: {members: [http://x:1]}, ep-a: {members: [http://y:1]}}",  # twice
    ]
    async with aiohttp.ClientSession() as session:

        async def refused(count: int) -> bool:
            text = await scrape(session, router)
            return metric(text, "kvpin_router_membership_errors_total", source="static") == count

        for count, bad in enumerate(bad_files, start=1):
            path.write_bytes(bad)
            await eventually("the bad file to be read and refused", lambda c=count: refused(c))
            assert (await chat(session, router, [{"role": "user", "content": "hi"}]))[0] == (
                urls[0]
            )
        path.write_text(f"endpoints: {{ep-a: {{members: [{urls[1]}]}}}}")

        async def reloaded() -> bool:
            return [m.name for m in membership.endpoints["ep-a"].config.members] == [urls[1]]

        await eventually("the good file", reloaded)
        member, _ = await chat(session, router, [{"role": "user", "content": "hi"}])
        text = await scrape(session, router)
    assert member == urls[1]
    assert metric(text, "kvpin_router_membership_errors_total", source="static") == 3


async def test_tenants_sharing_an_endpoint_share_no_cache(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    router = await start_router(
        endpoint("ep-a", [await start_sim()], cache_salt="tenant"),
        tokens=auth.parse_tokens("token-a team-a\ntoken-b team-b\ntoken-a2 team-a"),
    )
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hello"}]
    cached = {}
    for token in ("token-a", "token-b", "token-a2"):
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as s:
            cached[token] = (await chat(s, router, messages))[1]["usage"]["prompt_tokens_details"][
                "cached_tokens"
            ]
    assert cached["token-a"] == 0
    assert cached["token-b"] == 0  # the same prompt, another tenant: nothing to learn
    assert cached["token-a2"] > 100  # the same tenant, another token: its cache
    async with aiohttp.ClientSession() as session:
        body = {"model": "ep-a", "messages": messages}
        async with session.post(f"{router}/v1/chat/completions", json=body) as r:
            assert r.status == 401  # no token, no tenant: refused, not served unsalted


async def test_an_unknown_expectation_gets_a_json_417(start_router: StartRouter) -> None:
    router = await start_router(endpoint("ep-a", ["http://127.0.0.1:9"]))
    for path in ("/v1/chat/completions", "/nowhere"):
        answer = await upstreams.raw_request(router, upstreams.http_post(path, b"{}", Expect="0"))
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.split()[1] == b"417"
        assert json.loads(body)["error"]["code"] == "expectation_failed"


def chat_body(content: str = "x", **extra: object) -> dict:
    return {"model": "ep-a", "messages": [{"role": "user", "content": content}], **extra}


async def test_when_every_member_fails_the_last_members_own_5xx_is_relayed(
    start_upstream, start_router: StartRouter
) -> None:
    urls = [await start_upstream("busy-503"), await start_upstream("busy-503")]
    router = await start_router(endpoint("ep-a", urls), max_attempts=2)
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{router}/v1/chat/completions", json=chat_body()) as r,
    ):
        assert r.status == 503  # the engine's status, not the router's 502
        error = (await r.json())["error"]
        text = await scrape(session, router)
    assert error["type"] == "overloaded"
    assert error["message"].removeprefix("busy: ") in {u.removeprefix("http://") for u in urls}
    assert metric(text, "kvpin_router_retries_total") == 1
    assert metric(text, "kvpin_router_requests_total", code="503") == 1  # relayed, counted once


async def test_when_every_member_hangs_up_the_client_gets_a_json_502(
    start_upstream, start_router: StartRouter
) -> None:
    urls = [await start_upstream("hangup"), await start_upstream("hangup")]
    router = await start_router(endpoint("ep-a", urls), max_attempts=2)
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{router}/v1/chat/completions", json=chat_body()) as r,
    ):
        assert r.status == 502
        body = await r.json()
        assert "no member of `ep-a` answered (2 tried)" in body["error"]["message"]
        assert r.headers["Retry-After"]
        assert await settled(session, router) == 0


async def test_a_stream_broken_mid_response_is_cut_never_finished(
    start_upstream, start_router: StartRouter
) -> None:
    router = await start_router(endpoint("ep-a", [await start_upstream("broken-stream")]))
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{router}/v1/chat/completions", json=chat_body(stream=True)) as r:
            assert r.status == 200
            assert await r.content.readline() == b'data: {"choices": [{"text": "x"}]}\n'
            with pytest.raises(aiohttp.ClientPayloadError):
                await r.read()  # the client sees a broken response, not a finished one
        text = await scrape(session, router)
        assert metric(text, "kvpin_router_errors_total", reason="upstream_broken") == 1
        assert await settled(session, router) == 0


async def test_the_routers_own_token_is_never_sent_upstream(
    start_upstream, start_router: StartRouter
) -> None:
    url = await start_upstream("ok")
    guarded = await start_router(endpoint("ep-a", [url]), tokens=auth.parse_tokens("s3cret"))
    open_router = await start_router(endpoint("ep-a", [url]))
    async with aiohttp.ClientSession() as session:
        headers = {"Authorization": "Bearer s3cret"}
        async with session.post(
            f"{guarded}/v1/chat/completions", json=chat_body(), headers=headers
        ) as r:
            assert r.status == 200
            seen = {k.lower() for k in (await r.json())["headers"]}
        assert "authorization" not in seen
        # Without tokens of its own the router does not authenticate: the engine's key passes.
        headers = {"Authorization": "Bearer engine-key"}
        async with session.post(
            f"{open_router}/v1/chat/completions", json=chat_body(), headers=headers
        ) as r:
            seen_headers = (await r.json())["headers"]
        assert {k.lower(): v for k, v in seen_headers.items()}["authorization"] == (
            "Bearer engine-key"
        )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_an_unreachable_member_is_ejected_but_tried_when_all_are(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    port = free_port()  # nobody listens there yet
    live = await start_sim()
    router = await start_router(
        endpoint("ep-a", [f"http://127.0.0.1:{port}", live]),
        outliers=OutlierSettings(eject_seconds=3600),
        max_attempts=2,
    )
    async with aiohttp.ClientSession() as session:
        for i in range(6):  # whichever the key's owner, the dead member is passed over
            member, _ = await chat(session, router, [{"role": "user", "content": f"q{i}"}])
            assert member == "pod-1"
        text = await scrape(session, router)
        assert metric(text, "kvpin_router_ejections_total", member="pod-0") == 1
        # The only member left is ejected too: the router tries it rather than refuse.
        alone = await start_router(
            endpoint("ep-a", [f"http://127.0.0.1:{port}"]),
            outliers=OutlierSettings(eject_seconds=3600),
        )
        async with session.post(f"{alone}/v1/chat/completions", json=chat_body()) as r:
            assert r.status == 502  # refused: ejected now
        runner, _ = await serve(server.make_app(SimConfig(served_model_names=("ep-a",),
                                                          timing=FAST)), port=port)  # fmt: skip
        try:
            member, _ = await chat(session, alone, [{"role": "user", "content": "back"}])
            assert member == "pod-0"  # ejected, but all are: tried, and it answered
        finally:
            await runner.cleanup()


async def test_a_request_that_fails_over_arrives_once_and_a_deleted_endpoint_leaves_nothing(
    start_sim: StartSim,
) -> None:
    # The arrival rate prices moves (router.placement): a retry is the same request, not a
    # second arrival. And the router's estimates of an endpoint end with it.
    dead, live = f"http://127.0.0.1:{free_port()}", await start_sim()
    key = keys.routing_key("endpoint", "ep-a", "", None, prefix_chars=2048)
    first = next(ring.EndpointRing(endpoint("ep-a", [dead, live]).members).walk(key)).name
    urls = [dead, live] if first == "pod-0" else [live, dead]  # the dead member is tried first
    membership = FixedMembership({"ep-a": endpoint("ep-a", urls, key="endpoint")})
    settings = ProxySettings(engine_metrics_interval=0, max_attempts=2,
                             outliers=OutlierSettings(eject_seconds=3600))  # fmt: skip
    app = router_app.make_app(membership, settings)
    runner, router = await serve(app, **router_app.RUNNER_OPTIONS)
    try:
        async with aiohttp.ClientSession() as session:
            member, _ = await chat(session, router, [{"role": "user", "content": "hello"}])
            assert member != first  # it failed over
            assert metric(await scrape(session, router), "kvpin_router_ejections_total",
                          member=first) == 1  # fmt: skip
        estimates = app[router_app.PROXY].estimates
        arrived = estimates.arrivals["ep-a"].rate(time.monotonic()) * ARRIVALS_WINDOW_S
        assert 0.9 < arrived <= 1.0
        membership.publish({})
        tables = {name: t for name, t in vars(estimates).items() if isinstance(t, dict)}
        for name, table in tables.items():
            assert not [k for k in table if "ep-a" in (k if isinstance(k, tuple) else (k,))], name
    finally:
        await runner.cleanup()


async def test_a_request_to_a_restarted_member_stays_counted_when_one_from_before_ends(
    start_sim: StartSim,
) -> None:
    # A member back at a new address holds nothing: what the router counted queued there is
    # dropped. A request still in flight to its old address must not, when it ends, take back
    # what the router counted for requests sent to the new one (it would look idle).
    old = await start_sim(timing=replace_timing(prefill_tokens_per_s=2000, time_scale=1.0))
    new = await start_sim(timing=replace_timing(prefill_tokens_per_s=200, time_scale=1.0))
    membership = FixedMembership({"ep-a": endpoint("ep-a", [old], key="endpoint")})
    app = router_app.make_app(membership, ProxySettings(engine_metrics_interval=0))
    estimates = app[router_app.PROXY].estimates
    runner, router = await serve(app, **router_app.RUNNER_OPTIONS)

    def counted() -> tuple[float, int]:
        return estimates.pending[("ep-a", "pod-0")], estimates.waiting[("ep-a", "pod-0")]

    async def one_waiting() -> bool:
        return counted()[1] == 1

    try:
        async with aiohttp.ClientSession() as session:
            before = asyncio.create_task(  # ~0.5 s of prefill on the old pod
                chat(session, router, [{"role": "user", "content": "before " * 1000}])
            )
            await eventually("the first request sent", one_waiting)
            membership.publish({"ep-a": endpoint("ep-a", [new], key="endpoint")})
            assert counted() == (0.0, 0)  # what was queued at the old address is gone
            after = asyncio.create_task(  # ~2.5 s of prefill on the new one
                chat(session, router, [{"role": "user", "content": "after " * 500}])
            )
            await eventually("the second request sent", one_waiting)
            assert (await before)[0] == "pod-0"
            assert not after.done()
            pending, waiting = counted()
            assert waiting == 1 and pending > 200
            await after
        assert counted() == (0.0, 0)
    finally:
        await runner.cleanup()
