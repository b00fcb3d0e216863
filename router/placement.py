"""Placement by cost: stay with the cache until waiting there costs more than recomputing.

Pure. For one request and each candidate member the router estimates the time to first token
there: the prefill work already queued on the member plus the prefill of the tokens of this
request that the member does not hold, over the member's prefill rate. Then:

- The home is where the request's prefix is, as far as the router knows: the member holding
  the longest prefix of it, else the conversation's natural home (the proxy names it: one of the
  first members of the key's walk, picked by a hash of the conversation, the same on every
  replica). The home stays the choice unless another member's estimate is lower by more than
  the margin. The estimates already count the prefill a move recomputes; the margin prices what
  they do not: the copy left behind (cache space the pool loses to duplication) and the
  estimates' own error, which differs between router replicas (each sees its own requests).
  So it is `margin` times the prefill at stake (what the move recomputes plus what the request
  needs anyway), plus `margin_tokens`: a long conversation leaves its home only for a member far
  ahead, a new one only for a member clearly less loaded.
- Ties break by walk order, so replicas with the same membership and the same loads agree.

The estimates are guesses (router.holdings says why); nothing here is trusted beyond choosing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence


@dataclasses.dataclass(frozen=True)
class CostSettings:
    """How costs are weighed."""

    prefill_tokens_per_s: float = 10_000.0
    """A member's prefill rate until the router has measured it (routing.prefillTokensPerSecond)."""
    margin: float = 0.25
    """Another member must be ahead by this fraction of the prefill at stake..."""
    margin_tokens: int = 256
    """...plus this much prefill work (tokens), to move a request off its home."""


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


@dataclasses.dataclass(frozen=True)
class Decision:
    member: str
    moved: bool  # left its home for a member ahead by more than the margin


def decide(
    walk: Sequence[Candidate], home: str, prompt_tokens: int, settings: CostSettings
) -> Decision:
    """The member for a request; `walk` in the key's ring order, never empty, `home` in it."""
    stay = next((c for c in walk if c.name == home), walk[0])
    best = min(walk, key=lambda c: c.ttft(prompt_tokens))  # min keeps the first of equals
    at_stake = max(0, stay.cached_tokens - best.cached_tokens) + max(
        0, prompt_tokens - stay.cached_tokens
    )
    margin = (settings.margin * at_stake + settings.margin_tokens) / stay.rate
    if best is not stay and best.ttft(prompt_tokens) < stay.ttft(prompt_tokens) - margin:
        return Decision(best.name, moved=True)
    return Decision(stay.name, moved=False)
