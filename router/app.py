"""The router as an aiohttp application: routes, error rendering, start-up and clean-up.

Routes: POST /v1/{anything} (proxied; chat and text completions and every other OpenAI POST
are keyed the same way), GET /v1/models (the endpoints), /healthz (the process is up), /readyz
(membership loaded), /metrics (Prometheus), all on one port.
"""

from __future__ import annotations

import logging
import time

from aiohttp import web

from kvpin import logs, serving
from kvpin.router import errors
from kvpin.router.config import ProxySettings
from kvpin.router.membership.base import Membership
from kvpin.router.metrics import build_metrics
from kvpin.router.proxy import Proxy

log = logging.getLogger(logs.ROUTER)
PROXY = web.AppKey("proxy", Proxy)


renders_errors = serving.renders(errors.RouterError, errors.to_response)


@renders_errors
async def proxied(request: web.Request) -> web.StreamResponse:
    return await request.app[PROXY].handle(request)


@renders_errors
async def not_found(request: web.Request) -> web.StreamResponse:
    raise errors.NotFoundError(f"no route for {request.method} {request.path}")


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
    if request.app[PROXY].membership.ready:
        return web.Response(text="ok")
    return web.Response(status=503, text="membership not loaded yet")


async def metrics(request: web.Request) -> web.Response:
    return serving.metrics_response(request.app[PROXY].metrics.registry)


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
    app.router.add_get("/v1/models", list_models)
    app.router.add_post("/v1/{tail:.+}", proxied)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_route("*", "/{tail:.*}", not_found)
    return app


def run(app: web.Application, *, host: str, port: int) -> None:
    """Serve until interrupted; a client that goes away cancels its upstream request."""
    web.run_app(app, host=host, port=port, print=None, handler_cancellation=True,
                access_log=None)  # fmt: skip
