"""Run the operator: one kopf operator loop with kvpin's registry and config.

I/O. Called by `kvpin operator`; tests start that command as a real process.
"""

from __future__ import annotations

import asyncio

import kopf

from kvpin.operator import handlers
from kvpin.operator.settings import OperatorConfig


def run(config: OperatorConfig) -> None:
    """Serve until interrupted (SIGINT/SIGTERM stop kopf gracefully)."""
    asyncio.run(serve(config))


async def serve(config: OperatorConfig, *, stop_flag: asyncio.Event | None = None) -> None:
    """The operator as a coroutine, for embedding."""
    liveness = (
        f"http://{config.liveness_host}:{config.liveness_port}/healthz"
        if config.liveness_port
        else None
    )
    await kopf.operator(
        registry=handlers.build_registry(config),
        memo=kopf.Memo(config=config),
        standalone=True,  # see settings.apply_kopf_settings
        clusterwide=not config.namespaces,
        namespaces=list(config.namespaces),
        liveness_endpoint=liveness,
        stop_flag=stop_flag,
    )
