"""Placement by cost: stay with the cache until waiting there costs more than recomputing.

Pure. For one request and each candidate member the router estimates the time to first token
there: the prefill work already queued on the member plus the prefill of the tokens of this
request that the member does not hold, over the member's prefill rate. Then:

- A request with little or nothing cached anywhere, at most `fresh_below` (0.3) of its prompt,
  is placed as a new conversation: on whichever of the first two members of its conversation's
  own walk (router.proxy: the key and the conversation's first message) has less work to do
  for it, queued and uncached (ties: the first). Such a request is mostly new content, and so
  will be its later turns; following the short shared head it holds (a system prompt, a
  group's preamble) would pile every conversation sharing it onto the members holding that
  head, whose caches then evict each other's histories, while two choices per conversation
  keep cache occupancy and load even and the choice mostly a function of the conversation.
- Otherwise the home (the member holding the longest prefix of the request, else the key's
  ring owner) stays the choice unless another member's estimate is lower by more than the
  margin. The estimates count what a move costs this request; the margin prices what it costs
  everyone else: the prefill it recomputes is work the pool does on top, which the requests
  queued behind it on the destination wait through, and the copy left behind on the home is
  cache space lost to duplication. So a move must save this request more time than it adds to
  the pool: `margin` (1) times the tokens it recomputes, plus `margin_tokens` of hysteresis. A
  long conversation leaves its home only for a member far ahead, while a new conversation
  whose only cached part is a short shared head (system prompt, tools) spreads as soon as the
  head's holders have work queued. (At 0.25, the earlier default, moves bought no time on the
  benchmarks' traces and cost hit rate: docs/benchmarks.md.)
- Ties break by walk order, so replicas with the same membership and the same loads agree.

The estimates are guesses (router.holdings says why); nothing here is trusted beyond choosing.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence

DEFAULT_MOVE_MARGIN = 1.0  # routing.moveMargin


@dataclasses.dataclass(frozen=True)
class CostSettings:
    """How costs are weighed."""

    prefill_tokens_per_s: float = 10_000.0
    """A member's prefill rate until the router has measured it (routing.prefillTokensPerSecond)."""
    margin: float = DEFAULT_MOVE_MARGIN
    """Another member must be ahead by this multiple of the prefill a move recomputes..."""
    margin_tokens: int = 256
    """...plus this much prefill work (tokens), to move a request off its home."""
    fresh_below: float = 0.3
    """A request whose best-held prefix is at most this fraction of it is placed as new."""


@dataclasses.dataclass(frozen=True)
class Candidate:
    """What is estimated of one member for one request."""

    name: str
    queued_tokens: float  # prefill work ahead of this request there, in tokens
    cached_tokens: int  # tokens of this request it probably holds
    rate: float  # its prefill tokens per second

    def ttft(self, prompt_tokens: int) -> float:
        """Estimated seconds to the first token of a request of `prompt_tokens` there."""
        return (self.queued_tokens + max(0, prompt_tokens - self.cached_tokens)) / self.rate


def holders(
    walk: Sequence[str],
    chars: Mapping[str, int],
    *,
    prompt_tokens: int,
    previous_tokens: int,
    tokens: Callable[[int], int],
    slack_chars: int,
) -> tuple[str | None, dict[str, int]]:
    """The request's home among `walk`, and the tokens of it each member there probably holds.

    `chars` is what the placement index says each member holds of the prompt (leading
    characters). The home is the first member of the walk holding the longest prefix; when
    that prefix is held only off the walk (by a member tried, ejected or warming) there is no
    home and the request goes as one without (router.placement.decide: the ring owner). A later
    turn whose previous prompt is longer than anything this replica knows of it (by more than
    `slack_chars`: the index's chunking) went through another replica: it is presumed on its
    ring owner, `walk[0]`, where every replica sends a conversation it has not seen, holding
    the previous prompt.
    """
    cached = {m: min(prompt_tokens, tokens(chars[m])) for m in walk if chars.get(m)}
    longest = max(chars.values(), default=0)
    home = next((m for m in walk if longest and chars.get(m) == longest), None)
    if previous_tokens > tokens(longest + slack_chars):
        home = walk[0]
        cached[home] = max(cached.get(home, 0), previous_tokens)
    return home, cached


@dataclasses.dataclass(frozen=True)
class Decision:
    member: str
    moved: bool  # left its home for a member ahead by more than the margin
    fresh: bool  # little or nothing cached anywhere: placed as a new conversation


def decide(
    walk: Sequence[Candidate],
    home: str | None,
    prompt_tokens: int,
    settings: CostSettings,
    fresh_order: Iterable[str] = (),
) -> Decision:
    """The member for a request; `walk` in the key's ring order, never empty; `fresh_order`
    the members in the conversation's own ring order (empty: the key's), read only as far as
    a new conversation needs (a lazy walk costs nothing for the others)."""
    if max(c.cached_tokens for c in walk) <= settings.fresh_below * prompt_tokens:
        by_name = {c.name: c for c in walk}
        order = list(itertools.islice((by_name[n] for n in fresh_order if n in by_name), 2))
        order += [c for c in walk if c not in order]  # members off that order: in walk order
        # work in tokens, not time: measured rates differ from replica to replica, and
        # replicas that see the same loads must agree (min keeps the first of equals)
        first = min(order[:2], key=lambda c: c.queued_tokens - c.cached_tokens)
        return Decision(first.name, moved=False, fresh=True)
    stay = next((c for c in walk if c.name == home), walk[0])
    best = min(walk, key=lambda c: c.ttft(prompt_tokens))
    recomputed = max(0, stay.cached_tokens - best.cached_tokens)
    margin = (settings.margin * recomputed + settings.margin_tokens) / stay.rate
    if best is not stay and best.ttft(prompt_tokens) < stay.ttft(prompt_tokens) - margin:
        return Decision(best.name, moved=True, fresh=False)
    return Decision(stay.name, moved=False, fresh=False)
