"""The simulator's HTTP server: OpenAI-compatible endpoints over the simulated engine.

I/O at the edge: aiohttp handlers parse with `protocol`, generate with `engine`, and stream
with backpressure (each `write` drains). Routes: POST /v1/chat/completions, /v1/completions,
/reset_prefix_cache (vLLM's name for a cache flush); GET /v1/models, /health, /metrics.
Prompt contents are never logged.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import logging
import random
import time
from typing import Any

from aiohttp import web

from kvpin import api, logs, serving
from kvpin.sim import cache as caching
from kvpin.sim import protocol, tokens
from kvpin.sim.config import SimConfig
from kvpin.sim.engine import Engine, Generation
from kvpin.sim.metrics import SimMetrics, build_metrics

log = logging.getLogger(logs.SIM)


class Simulator:
    """One simulated engine: its cache, scheduler, metrics and fault dice."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.cache = caching.PrefixCache(config.capacity_blocks, block_size=config.block_size)
        self.engine = Engine(self.cache, config.timing)
        self.encode = (
            tokens.load_tokenizer(config.tokenizer) if config.tokenizer else tokens.tokenize
        )
        self.metrics: SimMetrics = build_metrics(
            config.names[0],
            usage=lambda: self.cache.usage,
            running=lambda: self.engine.num_running,
            waiting=lambda: self.engine.num_waiting,
            blocks=config.capacity_blocks,
            block_size=config.block_size,
        )
        self.started = time.monotonic()
        self.dice = random.Random(config.faults.seed)
        # the kind of each request received, in order (warm-up or user), for GET /debug/arrivals
        self.arrivals: collections.deque[str] = collections.deque(maxlen=10_000)

    def roll(self, rate: float) -> bool:
        """True with probability `rate` (deterministic for a seed)."""
        return rate > 0 and self.dice.random() < rate


SIMULATOR = web.AppKey("simulator", Simulator)


def _error(err: protocol.ProtocolError) -> web.Response:
    return web.json_response(err.to_body(), status=err.status)


_renders_errors = serving.renders(protocol.ProtocolError, _error)


@_renders_errors
async def _not_found(request: web.Request) -> web.StreamResponse:
    raise protocol.ProtocolError(
        404, f"no route for {request.method} {request.path}", type="NotFoundError"
    )


async def _body(request: web.Request) -> Any:
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge as err:
        raise protocol.ProtocolError(413, f"request body too large: {err.text}") from err
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise protocol.ProtocolError(400, f"the request body is not valid JSON: {err}") from err


@_renders_errors
async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _complete(request, "chat")


@_renders_errors
async def completions(request: web.Request) -> web.StreamResponse:
    return await _complete(request, "text")


async def _complete(request: web.Request, kind: str) -> web.StreamResponse:
    sim = request.app[SIMULATOR]
    config = sim.config
    sim.arrivals.append("warmup" if request.headers.get(api.WARMUP_HEADER) else "user")
    parsed = protocol.parse(
        kind, await _body(request), served=config.names, max_model_len=config.max_model_len,
        encode=sim.encode,
    )  # fmt: skip
    if sim.roll(config.faults.error_rate):
        raise protocol.ProtocolError(500, "simulated engine error", type="server_error")
    drop = sim.roll(config.faults.drop_rate)
    hashes = caching.block_hashes(
        parsed.prompt, block_size=config.block_size, salt=config.salt(parsed.cache_salt)
    )
    started = time.monotonic()
    generation = await sim.engine.start(hashes, len(parsed.prompt), parsed.max_tokens)
    try:
        sim.metrics.queries.inc(len(parsed.prompt))
        sim.metrics.hits.inc(generation.cached)
        sim.metrics.prompt_tokens.inc(len(parsed.prompt))
        ids = protocol.Ids.new(kind, config.names[0], config.pod_name)
        reply = _Reply(sim, parsed, ids, generation.cached)
        if parsed.stream:
            return await _stream(request, reply, generation, started=started, drop=drop)
        text: list[str] = []
        async for batch in generation.batches():
            if not text:
                sim.metrics.ttft.observe(time.monotonic() - started)
            text += (protocol.token_text(len(parsed.prompt), i) for i in batch)
        if drop:
            _drop(request)
        reply.finished(len(text))
        return web.json_response(
            protocol.completion(parsed, reply.ids, "".join(text), len(text), generation.cached)
        )
    finally:
        generation.close()


@dataclasses.dataclass(frozen=True)
class _Reply:
    """What every part of one response needs."""

    sim: Simulator
    request: protocol.Request
    ids: protocol.Ids
    cached: int

    def event(self, document: dict[str, Any]) -> bytes:
        """One server-sent event."""
        return b"data: " + json.dumps(document).encode() + b"\n\n"

    def finished(self, completion_tokens: int) -> None:
        self.sim.metrics.generation_tokens.inc(completion_tokens)
        self.sim.metrics.finished.inc()


async def _stream(
    request: web.Request,
    reply: _Reply,
    generation: Generation,
    *,
    started: float,
    drop: bool,
) -> web.StreamResponse:
    """SSE: one write per batch of ready tokens (one token per step under simulated time)."""
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    sim, parsed = reply.sim, reply.request
    stall = sim.roll(sim.config.faults.stall_rate)
    count = 0
    async for batch in generation.batches():
        if count == 0:
            sim.metrics.ttft.observe(time.monotonic() - started)
        events = []
        for index in batch:
            text = protocol.token_text(len(parsed.prompt), index)
            events.append(reply.event(protocol.chunk(parsed, reply.ids, text, first=count == 0)))
            count += 1
            if (drop and count >= 2) or (stall and count == 1):
                break
        await response.write(b"".join(events))
        if drop and count >= 2:
            _drop(request)
        if stall and count == 1:
            await asyncio.sleep(sim.config.faults.stall_s)
    tail = [reply.event(protocol.chunk(parsed, reply.ids, None, finish="length"))]
    if parsed.include_usage:
        tail.append(reply.event(protocol.usage_chunk(parsed, reply.ids, count, reply.cached)))
    tail.append(b"data: [DONE]\n\n")
    await response.write(b"".join(tail))
    await response.write_eof()
    reply.finished(count)
    return response


def _drop(request: web.Request) -> None:
    """Cut the connection without a proper end, as a crashing engine would."""
    if request.transport is not None:
        request.transport.abort()
    raise asyncio.CancelledError


async def models(request: web.Request) -> web.Response:
    sim = request.app[SIMULATOR]
    created = int(sim.started)
    data = [
        {"id": name, "object": "model", "created": created, "owned_by": "kvpin-sim",
         "root": sim.config.model, "max_model_len": sim.config.max_model_len}
        for name in sim.config.names
    ]  # fmt: skip
    return web.json_response({"object": "list", "data": data})


async def health(request: web.Request) -> web.Response:
    sim = request.app[SIMULATOR]
    if time.monotonic() - sim.started < sim.config.faults.startup_delay_s:
        return web.Response(status=503, text="starting")
    return web.Response(text="ok")


async def metrics(request: web.Request) -> web.Response:
    return serving.metrics_response(request.app[SIMULATOR].metrics.registry)


async def reset_prefix_cache(request: web.Request) -> web.Response:
    dropped = request.app[SIMULATOR].cache.flush()
    log.info("prefix cache flushed: %d blocks dropped", dropped)
    return web.json_response({"dropped_blocks": dropped})


async def debug_cached_tokens(request: web.Request) -> web.Response:
    """What this engine holds of a chat prompt right now, and the prefill queued ahead of it.

    Off by default (`--debug-routes`): the exactness yardstick of `kvpin bench` (its `oracle`
    policy) asks every engine this before placing each request. Nothing is changed by asking.
    """
    sim = request.app[SIMULATOR]
    config = sim.config
    parsed = protocol.parse(
        "chat", await _body(request), served=config.names, max_model_len=config.max_model_len,
        encode=sim.encode,
    )  # fmt: skip
    hashes = caching.block_hashes(
        parsed.prompt, block_size=config.block_size, salt=config.salt(parsed.cache_salt)
    )
    return web.json_response({
        "prompt_tokens": len(parsed.prompt),
        "cached_tokens": sim.cache.match(hashes, len(parsed.prompt)) * config.block_size,
        "queued_prefill_tokens": sim.engine.queued_prefill_tokens,
        "running": sim.engine.num_running,
        "prefilling": sim.engine.num_prefilling,
    })  # fmt: skip


async def debug_arrivals(request: web.Request) -> web.Response:
    """The kind of every request received so far, in order: `warmup` (marked by the kvpin
    router's warm-up header) or `user`. Off by default (`--debug-routes`): tests check that
    a new member was warmed before its first user request."""
    return web.json_response(list(request.app[SIMULATOR].arrivals))


def make_app(config: SimConfig) -> web.Application:
    """The simulator as an aiohttp application."""
    app = web.Application(client_max_size=config.max_body_bytes)
    sim = Simulator(config)
    app[SIMULATOR] = sim

    async def close_engine(_: web.Application) -> None:
        await sim.engine.close()

    app.on_cleanup.append(close_engine)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/reset_prefix_cache", reset_prefix_cache)
    if config.debug_routes:
        app.router.add_post("/debug/cached_tokens", _renders_errors(debug_cached_tokens))
        app.router.add_get("/debug/arrivals", debug_arrivals)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_route("*", "/{tail:.*}", _not_found)
    return app


DRAIN_SECONDS = 3600.0


def run(config: SimConfig, *, host: str, port: int) -> None:
    """Serve until interrupted; on SIGTERM, like vLLM's server, stop accepting and finish the
    requests in flight (Kubernetes' grace period bounds it)."""
    log.info(
        "kvpin sim serving %s on %s:%d: %d cache blocks of %d tokens",
        ", ".join(config.names), host, port, config.capacity_blocks, config.block_size,
    )  # fmt: skip
    web.run_app(
        make_app(config), host=host, port=port, print=None, handler_cancellation=True,
        access_log=None, shutdown_timeout=DRAIN_SECONDS,
    )  # fmt: skip
