"""`kvpin sim` over real HTTP on loopback, with the official openai client as the client."""

from __future__ import annotations

import asyncio
import json
import pathlib
import signal
import socket
import subprocess
import sys
import time

import aiohttp
import openai
import pytest

from tests.integration.conftest import StartRouter, StartSim, endpoint, replace_timing

SYSTEM = "You are the support agent of a large shop. " * 40  # ~400 tokens


def client(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


async def test_openai_client_reads_cached_tokens(start_sim: StartSim) -> None:
    url = await start_sim(served_model_names=("ep-a",))
    async with client(url) as c:
        first = await c.chat.completions.create(
            model="ep-a", max_tokens=4,
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi"}],
        )  # fmt: skip
        second = await c.chat.completions.create(
            model="ep-a", max_tokens=4,
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Help"}],
        )  # fmt: skip
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached > 0 and cached % 16 == 0
    assert second.usage.model_extra["prompt_cache_hit_tokens"] == cached
    assert (
        second.usage.model_extra["prompt_cache_miss_tokens"] == second.usage.prompt_tokens - cached
    )
    assert second.choices[0].message.content
    assert second.usage.completion_tokens == 4


async def test_openai_client_streams_with_usage_last(start_sim: StartSim) -> None:
    url = await start_sim()
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi"}]
    async with client(url) as c:
        await c.chat.completions.create(model="sim-8b", messages=messages, max_tokens=2)
        stream = await c.chat.completions.create(
            model="sim-8b", messages=messages, max_tokens=5, stream=True,
            stream_options={"include_usage": True},
        )  # fmt: skip
        chunks = [chunk async for chunk in stream]
    content = [
        ch.choices[0].delta.content for ch in chunks if ch.choices and ch.choices[0].delta.content
    ]
    assert len(content) == 5
    assert chunks[-1].choices == []
    usage = chunks[-1].usage
    assert usage.completion_tokens == 5
    assert usage.prompt_tokens_details.cached_tokens == (usage.prompt_tokens - 1) // 16 * 16


async def test_completions_with_token_ids_count_whole_blocks(start_sim: StartSim) -> None:
    url = await start_sim()
    shared = list(range(1, 16 * 3 + 1))  # three whole blocks
    async with client(url) as c:
        await c.completions.create(model="sim-8b", prompt=[*shared, 900, 901], max_tokens=1)
        again = await c.completions.create(model="sim-8b", prompt=[*shared, 902], max_tokens=1)
        text = await c.completions.create(model="sim-8b", prompt="hello there", max_tokens=3)
    assert again.usage.prompt_tokens_details.cached_tokens == 48
    assert text.choices[0].text and text.usage.completion_tokens == 3


async def test_a_cache_hit_lowers_time_to_first_token(start_sim: StartSim) -> None:
    url = await start_sim(timing=replace_timing(prefill_tokens_per_s=2_000, time_scale=0.2))
    prompt = list(range(1, 2001))  # 1 s of prefill when cold, 0.2 s of wall time
    async with aiohttp.ClientSession() as session:

        async def first_token(tokens: list[int]) -> float:
            started = time.monotonic()
            async with session.post(f"{url}/v1/completions", json={
                "model": "sim-8b", "prompt": tokens, "max_tokens": 2, "stream": True,
            }) as response:  # fmt: skip
                await response.content.readline()
                elapsed = time.monotonic() - started
                await response.read()
            return elapsed

        cold = await first_token(prompt)
        # the same prompt again, beside a cold one sent at the same moment: first to answer
        warm, other = await asyncio.gather(
            first_token(prompt), first_token(list(range(5001, 7001)))
        )
    assert cold >= 0.2 * 0.9  # a lower bound: load only makes it slower
    assert warm < other


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        (b"{not json", 400, "not valid JSON"),
        (json.dumps({"model": "sim-8b", "messages": []}).encode(), 400, "non-empty list"),
        (
            json.dumps({"model": "nope", "messages": [{"role": "user", "content": "x"}]}).encode(),
            404,
            "does not exist",
        ),
        (
            json.dumps({"model": "sim-8b", "prompt": "x " * 3000}).encode(),
            400,
            "maximum context length",
        ),
        (json.dumps({"model": "sim-8b", "prompt": "x" * 300_000}).encode(), 413, "too large"),
    ],
)
async def test_bad_input_gets_an_openai_error_and_the_server_keeps_serving(
    start_sim: StartSim, body: bytes, status: int, fragment: str
) -> None:
    url = await start_sim(max_model_len=4096, max_body_bytes=200_000)
    async with aiohttp.ClientSession() as session:
        path = "/v1/completions" if b'"prompt"' in body else "/v1/chat/completions"
        async with session.post(url + path, data=body) as response:
            assert response.status == status
            error = (await response.json())["error"]
            assert fragment in error["message"]
            assert error["type"]
        async with session.post(
            f"{url}/v1/completions", json={"model": "sim-8b", "prompt": "ok"}
        ) as ok:
            assert ok.status == 200


async def test_models_health_and_metrics(start_sim: StartSim) -> None:
    url = await start_sim(served_model_names=("ep-a", "sim-8b"))
    async with client(url) as c:
        listed = await c.models.list()
        assert [m.id for m in listed.data] == ["ep-a", "sim-8b"]
        for _ in range(2):
            await c.completions.create(model="ep-a", prompt=list(range(40)), max_tokens=1)
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{url}/health") as health:
            assert health.status == 200
        async with session.get(f"{url}/metrics") as response:
            text = await response.text()
    assert 'vllm:prefix_cache_queries_total{model_name="ep-a"} 80.0' in text
    assert 'vllm:prefix_cache_hits_total{model_name="ep-a"} 32.0' in text
    for name in (
        "vllm:kv_cache_usage_perc",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:time_to_first_token_seconds_bucket",
    ):
        assert name in text


async def test_flushing_the_cache(start_sim: StartSim) -> None:
    url = await start_sim()
    body = {"model": "sim-8b", "prompt": list(range(40)), "max_tokens": 1}
    async with aiohttp.ClientSession() as session:
        for _ in range(2):
            async with session.post(f"{url}/v1/completions", json=body) as r:
                cached = (await r.json())["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached == 32
        async with session.post(f"{url}/reset_prefix_cache") as r:
            assert (await r.json())["dropped_blocks"] == 2
        async with session.post(f"{url}/v1/completions", json=body) as r:
            assert (await r.json())["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


async def test_faults(start_sim: StartSim) -> None:
    from kvpin.sim.config import Faults

    starting = await start_sim(faults=Faults(startup_delay_s=30))
    failing = await start_sim(faults=Faults(error_rate=1.0))
    dropping = await start_sim(faults=Faults(drop_rate=1.0))
    stalling = await start_sim(faults=Faults(stall_rate=1.0, stall_s=30))
    stream = {"model": "sim-8b", "prompt": "hi", "max_tokens": 8, "stream": True}
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{starting}/health") as r:
            assert r.status == 503
        async with session.post(f"{failing}/v1/completions", json=stream) as r:
            assert r.status == 500
            assert (await r.json())["error"]["type"] == "server_error"
        with pytest.raises(aiohttp.ClientPayloadError):
            async with session.post(f"{dropping}/v1/completions", json=stream) as r:
                assert r.status == 200
                await r.read()
        async with session.post(f"{stalling}/v1/completions", json=stream) as r:
            first = await r.content.readline()
            assert first.startswith(b"data: ")
            assert await r.content.readline() == b"\n"  # the end of the first event
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(r.content.readline(), 0.3)


def test_the_kvpin_sim_command_serves_and_sizes_its_cache_from_bytes() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kvpin = pathlib.Path(sys.executable).parent / "kvpin"
    proc = subprocess.Popen(
        [str(kvpin), "sim", "--port", str(port), "--kv-cache-bytes", str(4 * 2**20),
         "--served-model-name", "ep-cli", "--time-scale", "0", "--pod-name", "ep-cli-0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        sync = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
        deadline = time.monotonic() + 20
        while True:
            try:
                sync.models.list()
                break
            except openai.APIConnectionError:
                assert time.monotonic() < deadline, "kvpin sim did not start"
                time.sleep(0.1)
        # 4 MiB / (128 KiB per token x 16) = 2 blocks: a 3-block prompt evicts its own head.
        prompt = list(range(1, 16 * 2 + 2))
        sync.completions.create(model="ep-cli", prompt=prompt, max_tokens=1)
        again = sync.completions.create(model="ep-cli", prompt=prompt, max_tokens=1)
        assert again.usage.prompt_tokens_details.cached_tokens == 32
        assert again.system_fingerprint == "ep-cli-0"
        other = list(range(100, 100 + 16 * 2 + 1))  # two new blocks evict both old ones
        sync.completions.create(model="ep-cli", prompt=other, max_tokens=1)
        assert (
            sync.completions.create(
                model="ep-cli", prompt=prompt, max_tokens=1
            ).usage.prompt_tokens_details.cached_tokens
            == 0
        )
    finally:
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=10)
    assert b"2 cache blocks" in output
    assert b"100, 101" not in output  # prompt contents are never logged


async def test_the_debug_route_tells_what_the_cache_holds_and_is_off_by_default(
    start_sim,
) -> None:
    import aiohttp

    messages = [{"role": "system", "content": "You are terse. " * 40},
                {"role": "user", "content": "hi"}]  # fmt: skip
    body = {"model": "ep-a", "messages": messages, "max_tokens": 1}
    plain, debug = await start_sim(), await start_sim(debug_routes=True)
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{plain}/debug/cached_tokens", json=body) as r:
            assert r.status == 404
        async with session.post(f"{debug}/debug/cached_tokens", json=body) as r:
            before = await r.json()
        async with session.post(f"{debug}/v1/chat/completions", json=body) as r:
            served = (await r.json())["usage"]["prompt_tokens"]
        async with session.post(f"{debug}/debug/cached_tokens", json=body) as r:
            after = await r.json()
    assert before["cached_tokens"] == 0 and before["prompt_tokens"] == served
    assert served - 16 <= after["cached_tokens"] < served  # whole blocks; the last token never
    assert after["queued_prefill_tokens"] == 0 and after["prefilling"] == 0


async def test_a_client_behind_the_router_can_tell_which_pod_answered(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    """Each pod names itself in `system_fingerprint`, through the router, streamed or not: the
    turns of one conversation name the same pod, and the pod's own cache agrees."""
    names = ("pod-0", "pod-1", "pod-2")
    urls = [await start_sim(pod_name=name) for name in names]
    router = await start_router(endpoint("ep-a", urls))
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi"}]
    async with client(router) as c:
        first = await c.chat.completions.create(model="ep-a", messages=messages, max_tokens=2)
        messages += [{"role": "assistant", "content": "Hello"}, {"role": "user", "content": "?"}]
        stream = await c.chat.completions.create(
            model="ep-a", messages=messages, max_tokens=2, stream=True,
            stream_options={"include_usage": True},
        )  # fmt: skip
        chunks = [chunk async for chunk in stream]
    assert first.system_fingerprint in names
    assert {chunk.system_fingerprint for chunk in chunks} == {first.system_fingerprint}
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens > 0  # it found its first turn
    async with aiohttp.ClientSession() as http:  # and the pod it named is the one that holds it
        served = urls[names.index(first.system_fingerprint)]
        async with http.post(f"{served}/reset_prefix_cache") as r:
            assert r.status == 200
    async with client(router) as c:
        again = await c.chat.completions.create(model="ep-a", messages=messages, max_tokens=2)
    assert again.system_fingerprint == first.system_fingerprint
    assert again.usage.prompt_tokens_details.cached_tokens == 0  # flushed: it was that pod
