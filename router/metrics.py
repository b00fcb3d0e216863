"""Every Prometheus metric of the router, defined once, in one registry per application (tests
run several routers in one process), and the labelled series in use.

`RouterMetrics.of(metric, *labels)` hands out a metric's child for those labels, cached
(prometheus-client's `labels()` takes a lock and validates on every call) and recorded, so that
`forget` can remove every series of an endpoint or of members that left: a router that follows
a changing pool must not keep reporting pods that are gone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
                   30, 60, 120, 300)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class RouterMetrics:
    """The router's metrics."""

    registry: CollectorRegistry
    requests: Counter  # endpoint, member, code
    errors: Counter  # endpoint, reason
    latency: Histogram  # endpoint, member: whole request
    ttfb: Histogram  # endpoint, member: time to the first response byte
    in_flight: Gauge  # endpoint, member
    retries: Counter  # endpoint
    spills: Counter  # endpoint: the request's home was over the loadFactor cap
    moves: Counter  # endpoint: placed off its home by the cost rule
    ejections: Counter  # endpoint, member
    ring_members: Gauge  # endpoint
    ring_changes: Counter  # endpoint
    prompt_tokens: Counter  # endpoint
    cached_tokens: Counter  # endpoint
    prefix_breaks: Counter  # endpoint, zone
    membership_errors: Counter  # source: failed reads of the membership
    warmups: Counter  # endpoint, outcome: joining members warmed (router.warmup)
    warmup_requests: Counter  # endpoint, outcome: the requests that warmed them
    relayed: Counter  # endpoint, outcome: requests sent to the replica owning their endpoint
    _children: dict[tuple[Any, tuple[str, ...]], Any] = dataclasses.field(default_factory=dict)

    @property
    def _per_member(self) -> tuple[Any, ...]:
        return (self.requests, self.latency, self.ttfb, self.in_flight, self.ejections)

    def of(self, metric: Any, *labels: str) -> Any:
        """The child of `metric` for `labels` (the endpoint first)."""
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def forget(self, endpoint: str, members: Collection[str] | None = None) -> None:
        """Remove the series of `members` of `endpoint` (None: every series of the endpoint)."""
        per_member = self._per_member
        for metric, labels in list(self._children):
            if labels[0] != endpoint:
                continue
            if members is not None and (metric not in per_member or labels[1] not in members):
                continue
            del self._children[metric, labels]
            metric.remove(*labels)


def build_metrics() -> RouterMetrics:
    """A fresh registry with every metric."""
    r = CollectorRegistry()
    ep, em = ["endpoint"], ["endpoint", "member"]

    def counter(name: str, doc: str, labels: list[str]) -> Counter:
        return Counter(f"kvpin_router_{name}", doc, labels, registry=r)

    def histogram(name: str, doc: str) -> Histogram:
        return Histogram(f"kvpin_router_{name}", doc, em, buckets=LATENCY_BUCKETS, registry=r)

    def gauge(name: str, doc: str, labels: list[str]) -> Gauge:
        return Gauge(f"kvpin_router_{name}", doc, labels, registry=r)

    return RouterMetrics(
        registry=r,
        requests=counter("requests", "Requests proxied.", [*em, "code"]),
        errors=counter("errors", "Requests answered with an error.", ["endpoint", "reason"]),
        latency=histogram("request_duration_seconds", "Whole request, as the client saw it."),
        ttfb=histogram("time_to_first_byte_seconds", "Until the member's first byte."),
        in_flight=gauge("in_flight", "Requests in flight per member.", em),
        retries=counter("retries", "Requests retried on another member.", ep),
        spills=counter(
            "spills",
            "Requests kept off their home (the member holding their prefix, else the key's "
            "ring owner) because it was over the loadFactor cap.",
            ep,
        ),
        moves=counter("moves", "Requests moved off their home: another member was cheaper.", ep),
        ejections=counter("ejections", "Members ejected after a failure.", em),
        ring_members=gauge("ring_members", "Members on the ring.", ep),
        ring_changes=counter("ring_changes", "Ring membership changes.", ep),
        prompt_tokens=counter("prompt_tokens", "Prompt tokens, from responses.", ep),
        cached_tokens=counter("cached_prompt_tokens", "Prompt tokens found cached.", ep),
        prefix_breaks=counter(
            "prefix_breaks",
            "Turns that did not extend the previous one, by zone.",
            ["endpoint", "zone"],
        ),
        membership_errors=counter(
            "membership_errors",
            "Failed reads of the membership (API errors, unusable files); the last good one stays.",
            ["source"],
        ),
        warmups=counter(
            "warmups",
            "Joining members warmed before taking new keys: warm, or timeout (joined anyway).",
            ["endpoint", "outcome"],
        ),
        warmup_requests=counter(
            "warmup_requests",
            "Warm-up requests sent to joining members (never counted as user requests).",
            ["endpoint", "outcome"],
        ),
        relayed=counter(
            "relayed",
            "Requests sent to the router replica that owns their endpoint (router.replicas): "
            "relayed, or unreachable (decided here instead).",
            ["endpoint", "outcome"],
        ),
    )
