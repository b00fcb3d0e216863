"""Where a benchmark sends each request: a router, a client-side baseline policy, or the oracle.

The baselines are what a plain Kubernetes Service (random, round robin) or a load-aware
balancer (least in-flight) would do; they pick a pod of the endpoint's pool directly. The
oracle is the exactness yardstick: before each request it asks every simulator what it holds
of the prompt and what prefill it has queued (`kvpin sim --debug-routes`), and applies the
kvpin router's own cost rule (router.placement) to those exact figures. The gap between
`kvpin` and `oracle` is what a router fed by the engines' KV events could add over kvpin's
guesses.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import aiohttp

from kvpin import api
from kvpin.router import bodies, breaks, estimates, keys, placement, ring

BASELINES = ("random", "round-robin", "least-inflight")


class Target:
    """Picks the base URL of each request and hears when it finished."""

    def pick(self, endpoint: str) -> str:
        raise NotImplementedError

    async def choose(self, endpoint: str, body: Mapping[str, Any]) -> str:
        """The base URL for this request (most targets need only the endpoint)."""
        return self.pick(endpoint)

    def done(self, url: str) -> None:
        """The request sent to `url` finished."""

    async def reconfigure(self, endpoint: str, members: Mapping[str, str]) -> None:
        """The endpoint's pool is now `members` (pod name -> URL): a lifecycle scenario."""
        raise NotImplementedError(f"{type(self).__name__} cannot change its pool")

    async def close(self) -> None:
        """Release what `choose` opened."""


Reconfigure = Callable[[str, Mapping[str, str]], Awaitable[None]]


class Routed(Target):
    """Every request to a router: one or several replicas per endpoint, taken in turn (as a
    Service's round robin would spread clients over router pods)."""

    def __init__(
        self, urls: Mapping[str, str | Sequence[str]], *, reconfigure: Reconfigure | None = None
    ) -> None:
        """`reconfigure` tells the routers of a new pool (how depends on the router)."""
        self.urls = {ep: [u] if isinstance(u, str) else list(u) for ep, u in urls.items()}
        self._turns = {ep: itertools.cycle(u) for ep, u in self.urls.items()}
        self._reconfigure = reconfigure

    def pick(self, endpoint: str) -> str:
        return next(self._turns[endpoint])

    async def reconfigure(self, endpoint: str, members: Mapping[str, str]) -> None:
        if self._reconfigure is None:
            await super().reconfigure(endpoint, members)
        else:
            await self._reconfigure(endpoint, members)


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

    async def reconfigure(self, endpoint: str, members: Mapping[str, str]) -> None:
        self.pools[endpoint] = list(members.values())
        self.cycles[endpoint] = itertools.cycle(self.pools[endpoint])
        for url in self.pools[endpoint]:
            self.in_flight.setdefault(url, 0)


class Oracle(Target):
    """kvpin's cost rule on exact cache contents and queues, asked of every simulator."""

    def __init__(
        self, pools: Mapping[str, Sequence[str]], *, costs: placement.CostSettings,
        prefix_chars: int,
    ) -> None:  # fmt: skip
        self.rings = {ep: _ring(urls) for ep, urls in pools.items()}
        self.costs = costs
        self.prefix_chars = prefix_chars
        self.demand: collections.defaultdict[str, placement.Demand] = collections.defaultdict(
            placement.Demand
        )
        self.breaks = breaks.BreakDetector()
        self.arrivals: collections.defaultdict[str, estimates.Arrivals] = collections.defaultdict(
            estimates.Arrivals
        )
        self._session: aiohttp.ClientSession | None = None

    async def _ask(self, url: str, body: Mapping[str, Any]) -> dict[str, Any]:
        assert self._session is not None
        async with self._session.post(f"{url}/debug/cached_tokens", json=body) as r:
            return dict(await r.json())

    async def choose(self, endpoint: str, body: Mapping[str, Any]) -> str:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        summary = bodies.summarize_body(body)  # what the router reads of it
        key = keys.routing_key("prefix", endpoint, summary.head, None,
                               prefix_chars=self.prefix_chars)  # fmt: skip
        walk = list(self.rings[endpoint].walk(key))
        now = time.monotonic()
        self.arrivals[endpoint].add(now)
        arrivals = self.arrivals[endpoint].rate(now) / len(walk)
        seen = await asyncio.gather(*(self._ask(m.name, body) for m in walk))
        if not all("cached_tokens" in answer for answer in seen):
            return walk[0].name  # the engines refuse it (too long, say): they will say so again
        candidates = [
            placement.Candidate(m.name, s["queued_prefill_tokens"]
                                + estimates.DECODE_TOKENS * s["running"],
                                s["cached_tokens"], self.costs.prefill_tokens_per_s,
                                s["prefilling"], arrivals)
            for m, s in zip(walk, seen, strict=True)
        ]  # fmt: skip
        prompt = seen[0]["prompt_tokens"]
        # the router's rule for new conversations (router.proxy), on exact token counts
        per_char = prompt / max(1, summary.prompt_chars)
        if summary.head_chars and summary.messages <= 1:
            self.demand[endpoint].add(key)
        head_tokens = round(summary.head_chars * per_char)
        by_conversation, spread = placement.new_conversations(
            head_tokens=head_tokens, first_tokens=round(summary.first_chars * per_char),
            share=self.demand[endpoint].share(key) if summary.head_chars else 1.0,
            members=len(walk), fresh_below=self.costs.fresh_below,
        )  # fmt: skip
        allowed = {m.name for m in (walk[:spread] if by_conversation else walk)}
        conversation = keys.conversation_id(summary.opening, None)
        broken = self.breaks.observe(f"{endpoint}/{conversation}", summary.turn)
        fresh_key = keys.conversation_key("prefix", key, conversation)
        fresh = [m.name for m in self.rings[endpoint].walk(fresh_key) if m.name in allowed]
        held = {c.name: c.cached_tokens for c in candidates}
        order = fresh if by_conversation else ()
        home = placement.home_of(held, [c.name for c in candidates], order)
        head = head_tokens if by_conversation else 0
        saturated = placement.saturated(c.waiting for c in candidates)
        decision = placement.decide(candidates, home, prompt, self.costs, fresh, head_tokens=head,
                                    head_changed=broken in breaks.HEAD_ZONES,
                                    saturated=saturated)  # fmt: skip
        return decision.member

    def pick(self, endpoint: str) -> str:
        raise TypeError("the oracle needs the request: use choose()")

    async def reconfigure(self, endpoint: str, members: Mapping[str, str]) -> None:
        self.rings[endpoint] = _ring(members.values())

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _ring(urls: Iterable[str]) -> ring.EndpointRing:
    """The oracle's ring: members named by URL (it asks each what it holds)."""
    return ring.EndpointRing([api.RingMember(u, u.removeprefix("http://")) for u in urls])
