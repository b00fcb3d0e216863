"""What each member's cache took in lately: the churn that evicts the conversations it holds.

Pure (no I/O, no clock). Every prompt token an engine computes is written into its KV cache
and pushes its least recently used blocks out, so a member that takes in more new content
than its peers forgets its conversations sooner. Placing new conversations by queued work
alone feeds the members whose requests found their cache (their queues drain fastest) with
the most new content: the caches that pay are churned hardest. router.placement therefore
also weighs, for a conversation's first turn, what each member took in lately, as
sglang-router's cache_aware weighs the size of each worker's tree, but decayed, so that what
a member took in long ago (its cache has turned over since) no longer counts.

Counted by the engines, not by this replica: each engine's cumulative count of prompt tokens
it computed (router.loads: vLLM's prefix cache queries minus hits, SGLang's prompt tokens
minus cached tokens), so every router replica reading the same engines weighs the same counts
and places a first turn as the others would (a count this replica made of its own requests
was tried and split replicas and a client's sessions over members: docs/benchmarks.md,
session 10). "Lately" is measured in the endpoint's own turnover, not in seconds: each
member's count decays by exp(-x / horizon) as the pool takes in x more tokens, where the
horizon is the pool's cache size. Between two readings (a few hundred milliseconds) the count
adds what this replica itself sent since the last. O(1) per member per reading and per
request; a few entries per member.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Collection, Mapping

DEFAULT_CACHE_TOKENS = float(2**20)  # a member's cache until the engine or config says


class Inflow:
    """Decayed counts of the tokens each member's engine computed, per endpoint."""

    def __init__(self) -> None:
        self._read: dict[tuple[str, str], tuple[float, float]] = {}  # when, the engine's count
        self._since: dict[tuple[str, str], float] = {}  # this replica's own sends since then
        self._counts: dict[tuple[str, str], tuple[float, float]] = {}  # -> count, total then
        self._total: collections.defaultdict[str, float] = collections.defaultdict(float)
        self._horizon: dict[str, float] = {}

    def observe(
        self, endpoint: str, readings: Mapping[str, tuple[float, float]], horizon: float
    ) -> None:
        """The members' counters as last read, `(when, tokens computed since the engine
        started)`, and the pool's cache size in tokens. A member's first reading is its
        baseline (what it computed before is nobody's recent past); a counter that went back
        restarted. A new reading replaces what this replica counted of its own since the last."""
        self._horizon[endpoint] = max(1.0, horizon)
        grown: dict[str, float] = {}
        for member, (at, count) in readings.items():
            key = (endpoint, member)
            last = self._read.get(key)
            if last is not None and last[0] == at:
                continue
            self._read[key] = (at, count)
            self._since.pop(key, None)
            if last is not None and count != last[1]:
                grown[member] = count - last[1] if count > last[1] else count
        if not grown:
            return
        total = self._total[endpoint] + sum(grown.values())
        for member, tokens in grown.items():  # one reading's growth counts as one step
            self._counts[(endpoint, member)] = (self._decayed(endpoint, member, total) + tokens,
                                                total)  # fmt: skip
        self._total[endpoint] = total

    def sent(self, endpoint: str, member: str, tokens: float) -> None:
        """This replica sent `member` a prompt of which it will compute about `tokens`: counted
        until the next reading, which counts it once the engine admits it. A burst of new
        conversations between two readings would otherwise all follow the one least churned
        at the last (the engines are read every few hundred milliseconds)."""
        key = (endpoint, member)
        if key in self._read:
            self._since[key] = self._since.get(key, 0.0) + tokens

    def _decayed(self, endpoint: str, member: str, total: float) -> float:
        count, then = self._counts.get((endpoint, member), (0.0, 0.0))
        return count * math.exp(-(total - then) / self._horizon[endpoint]) if count else 0.0

    def of(self, endpoint: str, member: str) -> float:
        """Tokens `member` took in lately: what its engine counted (decayed) and what this
        replica sent it since; 0 before its first reading."""
        if endpoint not in self._horizon:
            return 0.0
        since = self._since.get((endpoint, member), 0.0)
        return self._decayed(endpoint, member, self._total[endpoint]) + since

    def forget(self, endpoint: str, members: Collection[str]) -> None:
        """Members that left; an endpoint with none left is dropped whole."""
        for member in members:
            for table in (self._read, self._since, self._counts):
                table.pop((endpoint, member), None)
        if not any(e == endpoint for e, _ in self._read):
            self._total.pop(endpoint, None)
            self._horizon.pop(endpoint, None)
