"""What a joining member is warmed with (router.warmup), and its configuration."""

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiohttp
import orjson
import pytest
from aiohttp import web

from kvpin.router import holdings, keys, warmup
from kvpin.router.config import ConfigError, parse_warmup
from kvpin.router.metrics import build_metrics

SYSTEM = {"role": "system", "content": "You are terse."}
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {}}}]


def test_the_head_is_the_leading_system_messages_and_the_tools() -> None:
    body = {"messages": [SYSTEM, {"role": "user", "content": "hi"},
                         {"role": "system", "content": "later"}], "tools": TOOLS}  # fmt: skip
    assert orjson.loads(warmup.head_of(body)) == {"messages": [SYSTEM], "tools": TOOLS}
    assert orjson.loads(warmup.head_of({"messages": [SYSTEM]})) == {"messages": [SYSTEM]}
    assert warmup.head_of({"messages": [{"role": "user", "content": "hi"}]}) == b""
    assert warmup.head_of({"prompt": "completion bodies have no head"}) == b""


def test_a_warmup_request_computes_the_head_and_one_token() -> None:
    head = warmup.head_of({"messages": [SYSTEM], "tools": TOOLS})
    item = warmup.warming("ep-a", head, "tenant-salt")
    body = orjson.loads(item.body)
    assert body["messages"][0] == SYSTEM and body["messages"][-1]["role"] == "user"
    assert (body["tools"], body["max_tokens"], body["model"]) == (TOOLS, 1, "ep-a")
    assert body["cache_salt"] == "tenant-salt"
    assert "cache_salt" not in orjson.loads(warmup.warming("ep-a", head, "").body)
    # what the member holds afterwards is the head's chunks: a prefix of any request with it
    long_system = {"role": "system", "content": "x" * (3 * holdings.CHUNK_CHARS)}
    item = warmup.warming("ep-a", warmup.head_of({"messages": [long_system]}), "")
    request = {"messages": [long_system, {"role": "user", "content": "question"}]}
    full = holdings.chunk_names(keys.parse_zones(request))
    assert item.chunks and full.startswith(item.chunks)


def test_hot_heads_rank_by_use_and_stay_bounded() -> None:
    hot = warmup.HotHeads(capacity=3)
    for head, uses in ((b"a", 1), (b"b", 3), (b"c", 2)):
        for _ in range(uses):
            hot.seen(head, "")
    assert hot.top(2) == [(b"b", ""), (b"c", "")]
    hot.seen(b"a", "salt")  # another salt is another head
    assert len(hot.top(10)) == 3  # the least recently used (a, unsalted) was dropped
    assert (b"a", "") not in hot.top(10)
    hot.seen(b"", "")  # nothing to warm
    hot.seen(b"x" * (warmup.MAX_HEAD_BYTES + 1), "")  # too large to keep
    assert len(hot.top(10)) == 3 and hot.top(1) == [(b"b", "")]


def test_equal_uses_rank_the_most_recent_first() -> None:
    hot = warmup.HotHeads()
    for head in (b"old", b"new"):
        hot.seen(head, "")
    assert hot.top(1) == [(b"new", "")]


def test_members_that_join_or_come_back_elsewhere_are_cold() -> None:
    before = [("pod-0", "10.0.0.1:8000"), ("pod-1", "10.0.0.2:8000"), ("pod-2", "10.0.0.3:8000")]
    after = [("pod-0", "10.0.0.1:8000"), ("pod-1", "10.0.0.9:8000"), ("pod-3", "10.0.0.4:8000")]
    joined, cold = warmup.joined(before, after)
    assert joined == {"pod-1", "pod-3"}  # restarted at a new address, and new
    assert cold == {"pod-1", "pod-2"}  # its cache is gone, and left
    assert warmup.joined([], after)[0] == {"pod-0", "pod-1", "pod-3"}


def test_warmup_configuration_is_checked() -> None:
    config = parse_warmup({"heads": 0, "timeoutSeconds": 5, "concurrency": 1,
                           "prompts": [{"messages": [SYSTEM], "tools": TOOLS}]}, "x")  # fmt: skip
    assert (config.heads, config.timeout_s, config.concurrency) == (0, 5.0, 1)
    assert orjson.loads(config.prompts[0]) == {"messages": [SYSTEM], "tools": TOOLS}
    for bad, words in (
        ({"heads": -1}, "heads must be an integer >= 0"),
        ({"concurrency": 0}, "concurrency must be an integer >= 1"),
        ({"timeoutSeconds": float("inf")}, "timeoutSeconds must be positive"),
        ({"timeoutSeconds": "5s"}, "timeoutSeconds must be a number"),
        ({"prompts": "hi"}, "prompts must be a list"),
        ({"prompts": [{"system": "hi"}]}, "prompts[0] must be a mapping of `messages`"),
        ({"prompts": [{"messages": "hi"}]}, "prompts[0]: `messages` must be a list"),
        ({"prompts": [{"messages": [{"role": "user", "content": "hi"}]}]}, "system messages"),
    ):
        with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace("]", r"\]")):
            parse_warmup(bad, "x")


# The Warmer's I/O against a real loopback server (aiohttp), whose handler records what came.
async def engine_app(state: dict, port: int = 0) -> tuple[web.AppRunner, str]:
    async def handle(request: web.Request) -> web.Response:
        state["active"] += 1
        state["peak"] = max(state["peak"], state["active"])
        state["seen"].append((request.path, request.headers.get("X-Kvpin-Warmup"),
                              orjson.loads(await request.read())))  # fmt: skip
        state["types"] = {*state.get("types", ()), request.headers.get("Content-Type")}
        if state.get("hangup"):
            assert request.transport is not None
            request.transport.abort()
        await asyncio.sleep(state.get("delay", 0.01))
        state["active"] -= 1
        return web.json_response({}, status=state.get("status", 200))

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"


def items(n: int) -> list[warmup.Warming]:
    return [warmup.warming("ep", orjson.dumps({"messages": [{"role": "system",
            "content": f"head {i}"}]}), "") for i in range(n)]  # fmt: skip


async def warmer_run(state: dict, config: warmup.WarmupConfig, count: int):  # type: ignore[no-untyped-def]
    metrics, warmed = build_metrics(), []
    runner, url = await engine_app(state)
    warmer = warmup.Warmer(metrics, lambda ep, m, item: warmed.append((ep, m, item)))
    async with aiohttp.ClientSession() as session:
        warmer.warm("ep", "pod-0", url, items(count), config)  # before start: queued
        assert warmer.warming("ep") == set()
        warmer.start(session)
        assert warmer.warming("ep") == {"pod-0"} and warmer.warming("other") == set()
        await warmer._tasks["ep", "pod-0"]  # the warm-up's own task, to its end
        assert warmer.warming("ep") == set()
        await warmer.stop()
    await runner.cleanup()
    return metrics, warmed


def sample(metrics, name: str, **labels: str) -> float:  # type: ignore[no-untyped-def]
    value = metrics.registry.get_sample_value(name, labels)
    return value or 0.0


async def test_a_joining_member_gets_every_head_with_the_warmup_header_a_few_at_a_time() -> None:
    state = {"active": 0, "peak": 0, "seen": []}
    metrics, warmed = await warmer_run(state, warmup.WarmupConfig(concurrency=2), 5)
    assert len(state["seen"]) == 5 and state["peak"] == 2
    assert {(path, header) for path, header, _ in state["seen"]} == {("/v1/chat/completions", "1")}
    assert all(body["max_tokens"] == 1 for _, _, body in state["seen"])
    assert state["types"] == {"application/json"}
    assert [(ep, m) for ep, m, _ in warmed] == [("ep", "pod-0")] * 5
    assert {item.body for _, _, item in warmed} == {i.body for i in items(5)}
    assert sample(metrics, "kvpin_router_warmups_total", endpoint="ep", outcome="warm") == 1
    assert sample(metrics, "kvpin_router_warmup_requests_total", endpoint="ep",
                  outcome="ok") == 5  # fmt: skip


async def test_refused_warmups_are_counted_and_hold_nothing() -> None:
    state = {"active": 0, "peak": 0, "seen": [], "status": 300}  # anything not 2xx
    metrics, warmed = await warmer_run(state, warmup.WarmupConfig(concurrency=4), 3)
    assert warmed == []
    assert sample(metrics, "kvpin_router_warmup_requests_total", endpoint="ep",
                  outcome="error") == 3  # fmt: skip
    assert sample(metrics, "kvpin_router_warmups_total", endpoint="ep", outcome="warm") == 1


async def test_a_slow_member_joins_anyway_when_the_warmup_times_out() -> None:
    state = {"active": 0, "peak": 0, "seen": [], "delay": 1}
    config = warmup.WarmupConfig(concurrency=1, timeout_s=0.2)
    metrics, warmed = await warmer_run(state, config, 3)
    assert warmed == [] and len(state["seen"]) == 1  # one at a time: the first never ended
    assert sample(metrics, "kvpin_router_warmups_total", endpoint="ep", outcome="timeout") == 1


@contextlib.asynccontextmanager
async def slow_engine() -> AsyncIterator[tuple[warmup.Warmer, str]]:
    """A started Warmer and an engine that answers each warm-up after a second."""
    runner, url = await engine_app({"active": 0, "peak": 0, "seen": [], "delay": 1})
    warmer = warmup.Warmer(build_metrics(), lambda *_: None)
    try:
        async with aiohttp.ClientSession() as session:
            warmer.start(session)
            yield warmer, url
    finally:
        await runner.cleanup()


async def test_a_member_that_leaves_stops_being_warmed() -> None:
    async with slow_engine() as (warmer, url):
        warmer.warm("ep", "pod-0", url, items(2), warmup.WarmupConfig())
        warmer.warm("ep", "pod-1", url, [], warmup.WarmupConfig())  # nothing to send
        assert warmer.warming("ep") == {"pod-0"}
        warmer.cancel("ep", "pod-0")
        warmer.cancel("ep", "pod-9")  # unknown: nothing happens
        assert warmer.warming("ep") == set()
        await warmer.stop()


async def test_a_member_that_hangs_up_is_not_warm_and_the_log_says_how_it_went(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = {"active": 0, "peak": 0, "seen": [], "hangup": True}
    with caplog.at_level("INFO"):
        metrics, warmed = await warmer_run(state, warmup.WarmupConfig(), 2)
    assert warmed == []
    assert sample(metrics, "kvpin_router_warmup_requests_total", endpoint="ep",
                  outcome="error") == 2  # fmt: skip
    (record,) = [r for r in caplog.records if "warmed with" in r.msg]
    assert record.msg == "%s: %s warmed with %d heads in %.2fs (%s)"
    ep, member, count, seconds, outcome = record.args
    assert (ep, member, count, outcome) == ("ep", "pod-0", 2, "warm") and 0 <= seconds < 60


async def test_a_member_not_listening_yet_is_retried_until_it_is() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    metrics, warmed = build_metrics(), []
    warmer = warmup.Warmer(metrics, lambda ep, m, item: warmed.append(m))
    async with aiohttp.ClientSession() as session:
        warmer.start(session)
        warmer.warm("ep", "pod-0", f"http://127.0.0.1:{port}", items(1), warmup.WarmupConfig())
        task = warmer._tasks["ep", "pod-0"]
        await asyncio.sleep(warmup.RETRY_S * 2)  # refused at least once meanwhile
        runner, _ = await engine_app({"active": 0, "peak": 0, "seen": []}, port=port)
        await task
        await warmer.stop()
    await runner.cleanup()
    assert warmed == ["pod-0"]


async def test_warming_a_member_again_replaces_the_warmup_in_flight_and_stop_waits() -> None:
    async with slow_engine() as (warmer, url):
        warmer.warm("ep", "pod-0", url, items(1), warmup.WarmupConfig())
        first = warmer._tasks["ep", "pod-0"]
        warmer.warm("ep", "pod-0", url, items(2), warmup.WarmupConfig())
        second = warmer._tasks["ep", "pod-0"]
        await asyncio.sleep(0)
        assert first.cancelled() or first.cancelling()
        await warmer.stop()  # cancels the warm-up in flight and waits for it, raising nothing
        assert second.done()


def test_heads_include_developer_messages_and_salts_scope_them() -> None:
    body = {"messages": [{"role": "developer", "content": "rules"},
                         {"role": "user", "content": "q"}]}  # fmt: skip
    assert orjson.loads(warmup.head_of(body)) == {
        "messages": [{"role": "developer", "content": "rules"}]
    }
    item = warmup.warming("ep", warmup.head_of(body), "t")
    assert item.scope == b"t"
    assert orjson.loads(item.body) == {
        "messages": [{"role": "developer", "content": "rules"}, {"role": "user", "content": "Hi"}],
        "model": "ep", "max_tokens": 1, "stream": False, "cache_salt": "t",
    }  # fmt: skip
    hot = warmup.HotHeads()
    hot.seen(b"x" * warmup.MAX_HEAD_BYTES, "s")  # the limit itself is kept
    hot.seen(b"y" * (warmup.MAX_HEAD_BYTES + 1), "")
    assert hot.top(5) == [(b"x" * warmup.MAX_HEAD_BYTES, "s")]


def test_hot_heads_keep_64_heads_unless_told() -> None:
    hot = warmup.HotHeads()
    for i in range(65):
        hot.seen(f"head {i}".encode(), "")
    assert len(hot.top(100)) == 64 and (b"head 0", "") not in hot.top(100)
