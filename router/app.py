"""The router as an aiohttp application: routes, error rendering, start-up and clean-up.

Routes: POST to each inference route of `ProxySettings.routes` (chat and text completions,
embeddings, responses, ...: proxied, all keyed the same way), GET /v1/models (the endpoints),
/healthz (the process is up), /readyz (membership loaded and current), /metrics (Prometheus),
all on one port. Anything else is answered by the router itself (404, or 405 for a known path),
never forwarded: an engine's admin routes (`/reset_prefix_cache`, ...) are out of reach however
the path is spelled, because the member's URL is built from the matched route, not from what
the client sent. Every error is OpenAI-style JSON, an unexpected one included.
"""

from __future__ import annotations

import logging
import time

import aiohttp
from aiohttp import web

from kvpin import logs, serving
from kvpin.router import errors
from kvpin.router.config import ProxySettings
from kvpin.router.membership.base import Membership
from kvpin.router.metrics import build_metrics
from kvpin.router.proxy import Proxy

log = logging.getLogger(logs.ROUTER)
PROXY = web.AppKey("proxy", Proxy)


renders_errors = serving.renders(Exception, errors.render)


def forwarding(path: str) -> serving.Handler:
    """The handler of one inference route: forwards to `path` on the chosen member."""

    @renders_errors
    async def forward(request: web.Request) -> web.StreamResponse:
        return await request.app[PROXY].handle(request, path)

    return forward


async def expect_continue(request: web.Request) -> web.StreamResponse | None:
    """`Expect: 100-continue` is answered by the router (the body is read here, not upstream);
    any other expectation is refused with a JSON 417, as aiohttp would in plain text."""
    expect = request.headers.get("Expect", "")
    if expect.lower() != "100-continue":
        return errors.to_response(errors.ExpectationFailedError("only `Expect: 100-continue`"))
    if request.version == aiohttp.HttpVersion11:
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # the response proper has not started
    return None


@renders_errors
async def not_found(request: web.Request) -> web.StreamResponse:
    if request.path in request.app[PROXY].settings.routes:
        raise errors.MethodNotAllowedError(f"{request.path} takes POST")
    raise errors.NotFoundError(f"no route for {request.method} {request.path[:200]}")


@renders_errors
async def list_models(request: web.Request) -> web.StreamResponse:
    proxy = request.app[PROXY]
    proxy.authorize(request)
    created = int(time.time())
    data = [
        {"id": endpoint_id, "object": "model", "created": created, "owned_by": "kvpin",
         "members": len(endpoint.ring)}
        for endpoint_id, endpoint in sorted(proxy.membership.endpoints.items())
    ]  # fmt: skip
    return web.json_response({"object": "list", "data": data})


async def healthz(_: web.Request) -> web.Response:
    return web.Response(text="ok")


async def readyz(request: web.Request) -> web.Response:
    membership = request.app[PROXY].membership
    if not membership.ready:
        return web.Response(status=503, text="membership not loaded yet")
    stale = membership.stale()
    if stale:
        return web.Response(status=503, text=stale)
    return web.Response(text="ok")


@renders_errors
async def metrics(request: web.Request) -> web.StreamResponse:
    proxy = request.app[PROXY]
    if proxy.settings.metrics_auth:
        proxy.authorize(request)
    return serving.metrics_response(proxy.metrics.registry)


def make_app(membership: Membership, settings: ProxySettings) -> web.Application:
    """A router application over `membership`; it starts and stops the membership too."""
    app = web.Application(client_max_size=settings.max_body_bytes)
    proxy = Proxy(membership, settings, build_metrics())
    membership.metrics = proxy.metrics
    app[PROXY] = proxy

    async def start(_: web.Application) -> None:
        await proxy.start()
        await membership.start()
        log.info("router ready: %d endpoints", len(membership.endpoints))

    async def stop(_: web.Application) -> None:
        await membership.stop()
        await proxy.close()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    routes = [("GET", "/v1/models", list_models), ("GET", "/healthz", healthz),
              ("GET", "/readyz", readyz), ("GET", "/metrics", metrics),
              *(("POST", path, forwarding(path)) for path in settings.routes),
              ("*", "/{tail:.*}", not_found)]  # fmt: skip
    for method, path, handler in routes:
        app.router.add_route(method, path, handler, expect_handler=expect_continue)
    return app


RUNNER_OPTIONS = {
    "handler_cancellation": True,  # a client that goes away cancels its upstream request
    "auto_decompress": False,  # bodies are decoded by router.bodies, bounded, with a JSON error
    "access_log": None,
}


DRAIN_SECONDS = 3600.0  # on SIGTERM, streams in flight finish; Kubernetes' grace period rules


def run(app: web.Application, *, host: str, port: int) -> None:
    """Serve until interrupted; on SIGTERM stop accepting and let requests in flight finish."""
    web.run_app(app, host=host, port=port, print=None, shutdown_timeout=DRAIN_SECONDS,
                **RUNNER_OPTIONS)  # type: ignore[arg-type]  # fmt: skip
