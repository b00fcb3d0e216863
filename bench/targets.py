"""Where a benchmark sends each request: a router, or a client-side baseline policy.

The baselines are what a plain Kubernetes Service (random, round robin) or a load-aware
balancer (least in-flight) would do; they pick a pod of the endpoint's pool directly.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Mapping, Sequence

BASELINES = ("random", "round-robin", "least-inflight")


class Target:
    """Picks the base URL of each request and hears when it finished."""

    def pick(self, endpoint: str) -> str:
        raise NotImplementedError

    def done(self, url: str) -> None:
        """The request sent to `url` finished."""


class Routed(Target):
    """Every request to one router per endpoint (or one router for all of them)."""

    def __init__(self, urls: Mapping[str, str]) -> None:
        self.urls = dict(urls)

    def pick(self, endpoint: str) -> str:
        return self.urls[endpoint]


class Baseline(Target):
    """A client-side policy over each endpoint's pods."""

    def __init__(self, policy: str, pools: Mapping[str, Sequence[str]], *, seed: int = 1) -> None:
        if policy not in BASELINES:
            raise ValueError(f"unknown baseline {policy!r}")
        self.policy = policy
        self.pools = {ep: list(urls) for ep, urls in pools.items()}
        self.rng = random.Random(seed)
        self.cycles: dict[str, Iterator[str]] = {
            ep: itertools.cycle(urls) for ep, urls in self.pools.items()
        }
        self.in_flight: dict[str, int] = {u: 0 for urls in self.pools.values() for u in urls}

    def pick(self, endpoint: str) -> str:
        pool = self.pools[endpoint]
        if self.policy == "random":
            url = self.rng.choice(pool)
        elif self.policy == "round-robin":
            url = next(self.cycles[endpoint])
        else:
            url = min(pool, key=lambda u: self.in_flight[u])
        self.in_flight[url] += 1
        return url

    def done(self, url: str) -> None:
        if url in self.in_flight:
            self.in_flight[url] -= 1
