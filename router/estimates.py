"""The numbers placement weighs, kept per endpoint and member, and learned from answers.

Pure (no I/O; times are arguments). What this router replica knows:

- prefill work it sent a member and has not seen answered (the estimated uncached tokens of
  each request, until its first token comes back), and how many requests that is;
- each member's prefill rate: the endpoint's configured rate at first, then a moving average of
  what the router observes (uncached tokens from `usage` over the time to the first token) for
  requests that found nothing queued ahead of them, so queueing does not pass for slowness;
- each endpoint's characters per token (prompt characters over `usage.prompt_tokens`), to size
  the next prompts from their bodies;
- the mean uncached size of a request, to price requests other replicas sent (seen only as the
  engine's count of waiting requests, see router.loads);
- each endpoint's recent arrival rate, to price the requests that a move's prefill would delay
  (router.placement).
"""

from __future__ import annotations

import collections
import itertools
import math
from collections.abc import Collection
from typing import NamedTuple

from kvpin.router.loads import EngineLoad

DECODE_TOKENS = 32.0  # the prefill-equivalent cost of one running sequence in the batch
CHARS_PER_TOKEN = 4.0  # until measured: English text with a BPE tokenizer
SMOOTHING = 0.2  # weight of the newest observation in every moving average
MIN_SAMPLE_TOKENS = 256  # shorter prefills say more about latency than about rate
ARRIVALS_WINDOW_S = 5.0  # time constant of the arrival rate: about a busy member's queue


def _average(old: float | None, new: float) -> float:
    return new if old is None else old + SMOOTHING * (new - old)


def _others(engine: EngineLoad | None, mine_waiting: int) -> tuple[float, float]:
    """Other replicas' requests on a member, waiting and running, from its scrape: those
    beyond this replica's when it was read, waiting as far as the engine's queue exceeds
    this replica's own waiting requests."""
    if engine is None:
        return 0.0, 0.0
    others = max(0.0, engine.waiting + engine.running - engine.mine)
    waiting = min(others, max(0.0, engine.waiting - mine_waiting))
    return waiting, others - waiting


class Arrivals:
    """An endpoint's requests per second lately: a count decayed exponentially over
    ARRIVALS_WINDOW_S, so a burst shows at once and fades as it passes. O(1)."""

    def __init__(self) -> None:
        self._count, self._at = 0.0, 0.0

    def add(self, now: float) -> None:
        """One request came in at `now`."""
        self._count, self._at = self._decayed(now) + 1.0, now

    def rate(self, now: float) -> float:
        return self._decayed(now) / ARRIVALS_WINDOW_S

    def _decayed(self, now: float) -> float:
        return self._count * math.exp(-max(0.0, now - self._at) / ARRIVALS_WINDOW_S)


class Sent(NamedTuple):
    """A request counted on a member until its first token: what `answered` takes back.
    `opened` names the count it joined, so a request sent before its member was forgotten
    (it left, or restarted) takes nothing back from requests sent there since."""

    endpoint: str
    member: str
    uncached: float
    opened: int


class Estimates:
    """Load, rate and size estimates of one router replica."""

    def __init__(self) -> None:
        self.pending: collections.defaultdict[tuple[str, str], float] = collections.defaultdict(
            float
        )
        self.waiting: collections.defaultdict[tuple[str, str], int] = collections.defaultdict(int)
        self.rates: dict[tuple[str, str], float] = {}
        self.chars_per_token: dict[str, float] = {}
        self.mean_uncached: dict[str, float] = {}
        self.arrivals: collections.defaultdict[str, Arrivals] = collections.defaultdict(Arrivals)
        self.opened: dict[tuple[str, str], int] = {}  # when each member's count began
        self._counts = itertools.count()

    def tokens(self, endpoint: str, chars: int) -> int:
        """Tokens of a text of `chars` characters sent to `endpoint`."""
        return round(chars / self.chars_per_token.get(endpoint, CHARS_PER_TOKEN))

    def chars(self, endpoint: str, tokens: float) -> float:
        """Characters of a text of `tokens` tokens sent to `endpoint`."""
        return tokens * self.chars_per_token.get(endpoint, CHARS_PER_TOKEN)

    def rate(self, endpoint: str, member: str, default: float) -> float:
        """The member's measured prefill rate; for a member not measured yet, the mean of its
        endpoint's measured members (a new member is presumed like its peers, neither faster,
        which would draw every request to it, nor slower), else `default`."""
        rate = self.rates.get((endpoint, member))
        if rate is not None:
            return rate
        peers = [r for (e, _), r in self.rates.items() if e == endpoint]
        return sum(peers) / len(peers) if peers else default

    def queued(
        self, endpoint: str, member: str, in_flight: int, engine: EngineLoad | None
    ) -> float:
        """Prefill work (tokens) ahead of a new request on `member`.

        This replica's own requests are known exactly (their pending prefill, and the rest
        running). The engine's scrape adds what other replicas sent: its requests beyond the
        ones this replica had there when it was read, so a scrape up to `max_age` old does not
        count requests of this replica that have ended since.
        """
        key = (endpoint, member)
        others_waiting, others_running = _others(engine, self.waiting[key])
        running = max(0, in_flight - self.waiting[key]) + others_running
        waiting_work = others_waiting * self.mean_uncached.get(endpoint, 1024.0)
        return self.pending[key] + waiting_work + DECODE_TOKENS * running

    def unadmitted(self, endpoint: str, member: str) -> float:
        """Uncached tokens sent to `member` whose first token has not come: at most what it
        has not taken cache blocks for yet (router.holdings.Holdings.admitting). An upper
        bound: a prompt being prefilled has taken some (vLLM, chunk by chunk) or all (kvpin
        sim, at admission) of its blocks already."""
        return self.pending.get((endpoint, member), 0.0)

    def waiting_at(self, endpoint: str, member: str, engine: EngineLoad | None) -> float:
        """Requests on `member` still waiting for their first token: this replica's, and
        those of other replicas that the engine's scrape shows waiting (as in queued)."""
        mine = self.waiting[(endpoint, member)]
        return mine + _others(engine, mine)[0]

    def sent(self, endpoint: str, member: str, uncached: float) -> Sent:
        key = (endpoint, member)
        if key not in self.opened:
            self.opened[key] = next(self._counts)
        self.pending[key] += uncached
        self.waiting[key] += 1
        self.mean_uncached[endpoint] = _average(self.mean_uncached.get(endpoint), uncached)
        return Sent(endpoint, member, uncached, self.opened[key])

    def answered(self, sent: Sent) -> None:
        """The request's first token came (or it ended without one). A member or endpoint
        forgotten since it was sent stays forgotten, and keeps counting what was sent since."""
        key = (sent.endpoint, sent.member)
        if self.opened.get(key) == sent.opened:
            self.pending[key] = max(0.0, self.pending[key] - sent.uncached)
            self.waiting[key] = max(0, self.waiting[key] - 1)

    def learn(
        self, endpoint: str, member: str, *, prompt_chars: int, prompt_tokens: int,
        uncached_tokens: int, ttft_s: float, alone: bool,
    ) -> None:  # fmt: skip
        """What one answer's usage says about the tokenizer and the member's speed."""
        if prompt_chars and prompt_tokens:
            ratio = prompt_chars / prompt_tokens
            self.chars_per_token[endpoint] = _average(self.chars_per_token.get(endpoint), ratio)
        if alone and uncached_tokens >= MIN_SAMPLE_TOKENS and ttft_s > 0:
            key = (endpoint, member)
            self.rates[key] = _average(self.rates.get(key), uncached_tokens / ttft_s)

    def forget(self, endpoint: str, members: Collection[str]) -> None:
        """Members whose cache is gone (they left, or came back at a new address)."""
        for table in (self.pending, self.waiting, self.rates, self.opened):
            for member in members:
                table.pop((endpoint, member), None)  # type: ignore[attr-defined]

    def drop(self, endpoint: str) -> None:
        """An endpoint that is gone: nothing of it is kept, so a router whose endpoints come
        and go (CachedEndpoints created and deleted) holds only those that exist."""
        for table in (self.pending, self.waiting, self.rates, self.opened):
            for key in [k for k in table if k[0] == endpoint]:
                del table[key]  # type: ignore[attr-defined]
        for table in (self.chars_per_token, self.mean_uncached, self.arrivals):
            table.pop(endpoint, None)  # type: ignore[attr-defined]
