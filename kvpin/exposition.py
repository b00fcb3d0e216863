"""Serving a Prometheus registry from an aiohttp handler (the router's and the simulator's
/metrics)."""

from __future__ import annotations

import prometheus_client
from aiohttp import web


def metrics_response(registry: prometheus_client.CollectorRegistry) -> web.Response:
    """The registry in the Prometheus text format."""
    return web.Response(
        body=prometheus_client.generate_latest(registry),
        headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST},
    )
