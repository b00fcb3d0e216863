"""Membership: the current endpoints and their rings, replaced whole on every change.

The proxy reads `membership.endpoints` (a plain dict it never mutates) for each request; a
source (a static file, CachedEndpoints) calls `publish` with a new set of EndpointConfigs. Rings
of endpoints whose members and routing did not change are reused, so requests in flight and
new ones see consistent rings, and nothing is dropped by a reload.
"""

from __future__ import annotations

import abc
import dataclasses
import logging
from collections.abc import Callable, Mapping

from kvpin import logs
from kvpin.router.config import EndpointConfig
from kvpin.router.metrics import RouterMetrics
from kvpin.router.ring import EndpointRing

log = logging.getLogger(logs.MEMBERSHIP)


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """An endpoint as the proxy uses it."""

    config: EndpointConfig
    ring: EndpointRing


Listener = Callable[[Mapping[str, "Endpoint"], Mapping[str, "Endpoint"]], None]


class Membership(abc.ABC):
    """A source of endpoints. Subclasses fetch; this class publishes."""

    def __init__(self) -> None:
        self.endpoints: Mapping[str, Endpoint] = {}
        self.ready = False
        self.metrics: RouterMetrics | None = None
        self.listeners: list[Listener] = []  # called with (old, new) after each publish

    def stale(self) -> str | None:
        """Why the snapshot may no longer be current (for /readyz), or None."""
        return None

    @abc.abstractmethod
    async def start(self) -> None:
        """Load the first snapshot (ready afterwards) and begin following changes."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Stop following changes."""

    def publish(self, configs: Mapping[str, EndpointConfig]) -> None:
        """Replace the snapshot; log and count what changed."""
        old = self.endpoints
        new: dict[str, Endpoint] = {}
        for endpoint_id, config in configs.items():
            previous = old.get(endpoint_id)
            if previous is not None and previous.config == config:
                new[endpoint_id] = previous
                continue
            new[endpoint_id] = Endpoint(
                config, EndpointRing(config.members, virtual_nodes=config.routing.virtual_nodes)
            )
            before = {m.name for m in previous.config.members} if previous else set()
            after = {m.name for m in config.members}
            if previous is None or previous.config.members != config.members:
                log.info(
                    "endpoint %s: %d members (+%s -%s)", endpoint_id, len(after),
                    ",".join(sorted(after - before)) or "none",
                    ",".join(sorted(before - after)) or "none",
                )  # fmt: skip
                if self.metrics:
                    self.metrics.of(self.metrics.ring_changes, endpoint_id).inc()
        for gone in old.keys() - new.keys():
            log.info("endpoint %s removed", gone)
        if self.metrics:
            for endpoint_id, endpoint in new.items():
                self.metrics.of(self.metrics.ring_members, endpoint_id).set(len(endpoint.ring))
        self.endpoints = new
        self.ready = True
        for listener in self.listeners:
            listener(old, new)


class FixedMembership(Membership):
    """Endpoints given once, in code (tests, the demo)."""

    def __init__(self, configs: Mapping[str, EndpointConfig]) -> None:
        super().__init__()
        self._configs = dict(configs)

    async def start(self) -> None:
        self.publish(self._configs)

    async def stop(self) -> None:
        return None
