"""Reading members' own load (router.loads) from a real loopback /metrics endpoint."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from kvpin.router.loads import EngineLoad, EngineLoads


async def metrics_server(texts: dict[str, tuple[int, str]]) -> tuple[web.AppRunner, str]:
    async def handle(request: web.Request) -> web.Response:
        status, text = texts["now"]
        return web.Response(status=status, text=text)

    app = web.Application()
    app.router.add_get("/metrics", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"


async def test_loads_are_read_stamped_with_this_replicas_own_and_expire() -> None:
    texts = {"now": (200, "vllm:num_requests_waiting 3\nvllm:num_requests_running 2\n")}
    runner, url = await metrics_server(texts)
    urls = {url, "http://127.0.0.1:9"}  # the second: nobody listens, so no load, no error
    loads = EngineLoads(lambda: urls, lambda u: 4 if u == url else 0, interval=0.01,
                        timeout=0.5, max_age=60.0)  # fmt: skip
    async with aiohttp.ClientSession() as session:
        loads.start(session)
        for _ in range(500):
            if loads.get(url, asyncio.get_running_loop().time()):
                break
            await asyncio.sleep(0.01)
        load = loads.get(url, asyncio.get_running_loop().time())
        assert load is not None and (load.waiting, load.running, load.mine) == (3, 2, 4)
        assert loads.get(url, load.at + 60.0) == load  # exactly max_age: still fresh
        assert loads.get(url, load.at + 60.1) is None
        assert loads.get("http://127.0.0.1:9", load.at) is None
        texts["now"] = (500, "vllm:num_requests_waiting 99\n")  # an error page is no load
        await asyncio.sleep(0.1)
        assert loads.get(url, asyncio.get_running_loop().time()).waiting == 3
        urls.clear()  # the member left: its load goes
        await asyncio.sleep(0.1)
        assert loads.get(url, load.at) is None
        await loads.stop()
    await runner.cleanup()


async def test_an_interval_of_zero_never_reads() -> None:
    loads = EngineLoads(lambda: ["http://127.0.0.1:9"], lambda u: 0, interval=0)
    async with aiohttp.ClientSession() as session:
        loads.start(session)
        assert loads._task is None
        await loads.stop()  # nothing started: nothing to stop
    assert loads.get("http://127.0.0.1:9", 0.0) is None
    assert EngineLoad(1, 2, 3).mine == 0
