"""What each member's cache took in lately: the churn that evicts the conversations it holds.

Pure (no I/O, no clock). Every prompt token a member computes is written into its KV cache and
pushes the least recently used blocks out; a member that takes in more new content than its
peers forgets its conversations sooner. Placing new conversations by queued work alone feeds
the members whose requests found their cache (their queues drain fastest) with the most new
content, so the caches that pay are the ones churned hardest. router.placement therefore also
weighs what a member took in lately, as sglang-router's cache_aware weighs the size of each
worker's tree, but decayed, so that what a member took in long ago (its cache has turned over
since) no longer counts.

"Lately" is measured in the endpoint's own turnover, not in seconds: each member's count decays
by exp(-x / horizon) as the whole endpoint takes in x more tokens, where the horizon is the
pool's cache size (`resize`). So it means the same at any request rate, and a replica that
decides a third of the keys (router.replicas) weighs its third the same way. Counted from
what this replica sent (uncached tokens, estimated when sent); a guess like every estimate.
O(1) per request, one entry per member.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Collection

DEFAULT_HORIZON_TOKENS = float(2**20)  # per member, until its cache size is known


class Inflow:
    """Decayed counts of the tokens each member's cache took in, per endpoint."""

    def __init__(self) -> None:
        self._total: collections.defaultdict[str, float] = collections.defaultdict(float)
        self._members: dict[tuple[str, str], tuple[float, float]] = {}  # -> count, total then
        self._horizon: dict[str, float] = {}

    def resize(self, endpoint: str, tokens: float) -> None:
        """The endpoint's pool caches this many tokens in all: a count decays by e over it."""
        self._horizon[endpoint] = tokens

    def of(self, endpoint: str, member: str) -> float:
        """Tokens `member` took in lately (decayed)."""
        count, then = self._members.get((endpoint, member), (0.0, 0.0))
        if not count:
            return 0.0
        horizon = self._horizon.get(endpoint, DEFAULT_HORIZON_TOKENS)
        return count * math.exp(-(self._total[endpoint] - then) / horizon)

    def add(self, endpoint: str, member: str, tokens: float) -> None:
        """`member` is sent a prompt of which it will compute (and cache) `tokens`."""
        count = self.of(endpoint, member) + tokens
        self._total[endpoint] += tokens
        self._members[(endpoint, member)] = (count, self._total[endpoint])

    def forget(self, endpoint: str, members: Collection[str]) -> None:
        """Members whose cache is gone; an endpoint with none left is dropped whole."""
        for member in members:
            self._members.pop((endpoint, member), None)
        if not any(e == endpoint for e, _ in self._members):
            self._total.pop(endpoint, None)
            self._horizon.pop(endpoint, None)
