"""What each member's cache took in lately: the churn that evicts the conversations it holds.

Pure (no I/O, no clock). Every prompt token a member computes is written into its KV cache and
pushes the least recently used blocks out, so a member that takes in more new content than its
peers forgets its conversations sooner. Placing new conversations by queued work alone feeds
the members whose requests found their cache (their queues drain fastest) the most new
content: the caches that pay are churned hardest. router.placement therefore also weighs, for a
conversation's first turn, what each member took in lately (as sglang-router's cache_aware
weighs the size of each worker's tree, but forgetting what has long turned over).

The counts come from the engines (router.loads: prompt tokens computed since each started):
every router replica reads the same engines, so replicas with the same membership see the same
churn and agree, and a replica that decides only a third of the keys (router.replicas) still
sees all of it. To them each replica adds what it sent a member since that member was last
read (its estimate of the uncached tokens), until the next read, which has counted them: a
count that moved only with the reads would send every new conversation of a burst to the
member that took in least, before the next read, up to a quarter of a second later.

"Lately" is measured in the endpoint's own turnover, not seconds: each member's count decays by
exp(-x / horizon) as the whole endpoint takes in x more tokens, the horizon being the pool's
cache size. So it means the same at any request rate: the sum over members tends to one
horizon, and a member's share of it is its share of what went into the pool's caches while
they turned over once. An engine whose counter went back (it restarted, its cache is empty)
starts again from nothing. O(members) per read, O(1) per request; per member, one entry and the
sends since its last read.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Collection, Mapping

RECENT = 4096  # sends kept per member between two reads (beyond: a burst is a burst)


@dataclasses.dataclass
class _Member:
    seen: float  # the engine's counter when last read
    count: float = 0.0  # tokens taken in lately, decayed
    read_at: float = -math.inf  # when that read was taken
    recent: collections.deque[tuple[float, float]] = dataclasses.field(
        default_factory=lambda: collections.deque(maxlen=RECENT)
    )  # what this replica sent it since (when, tokens)
    recent_tokens: float = 0.0  # their sum

    def since_read(self) -> float:
        """What this replica sent it that the last read did not count."""
        while self.recent and self.recent[0][0] < self.read_at:
            self.recent_tokens -= self.recent.popleft()[1]
        return max(0.0, self.recent_tokens) if self.recent else 0.0

    def add_sent(self, at: float, tokens: float) -> None:
        self.since_read()
        if len(self.recent) == self.recent.maxlen:
            self.recent_tokens -= self.recent[0][1]
        self.recent.append((at, tokens))
        self.recent_tokens += tokens


class Churn:
    """Decayed counts of the prompt tokens each member computed, per endpoint."""

    def __init__(self) -> None:
        self._members: dict[str, dict[str, _Member]] = {}  # endpoint -> member ->

    def observe(
        self, endpoint: str, computed: Mapping[str, tuple[float, float]], horizon: float
    ) -> None:
        """Members' counters as last read, each with the time of its read (router.loads);
        `horizon`: the pool's cache size in tokens. A member read for the first time counts
        from there."""
        members = self._members.setdefault(endpoint, {})
        added: dict[str, float] = {}
        for name, (total, at) in computed.items():
            member = members.get(name)
            if member is None or total < member.seen:  # new, or restarted: an empty cache
                member = members[name] = _Member(total)
            elif total > member.seen:
                added[name] = total - member.seen
                member.seen = total
            member.read_at = max(member.read_at, at)
        if not added or horizon <= 0:
            return
        decay = math.exp(-sum(added.values()) / horizon)
        for name, member in members.items():
            member.count = member.count * decay + added.get(name, 0.0)

    def sent(self, endpoint: str, member: str, tokens: float, now: float) -> None:
        """This replica sent `member` a prompt of which it will compute `tokens`; counted
        until a read taken after `now`."""
        known = self._members.get(endpoint, {}).get(member)
        if known is not None and tokens > 0:
            known.add_sent(now, tokens)

    def of(self, endpoint: str, member: str) -> float | None:
        """Tokens `member` took in lately; None if its engine was never read."""
        known = self._members.get(endpoint, {}).get(member)
        return None if known is None else known.count + known.since_read()

    def forget(self, endpoint: str, members: Collection[str]) -> None:
        """Members whose cache is gone; an endpoint with none left is dropped whole."""
        known = self._members.get(endpoint)
        if known is None:
            return
        for member in members:
            known.pop(member, None)
        if not known:
            del self._members[endpoint]
