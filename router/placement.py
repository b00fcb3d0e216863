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
  In a burst, when both of its choices already have a request waiting for its first token,
  it takes the member with the least work of all those it may go to: two choices among a
  few members collide often, and a new conversation recomputes its whole prompt behind the
  prefills already queued there (these set the bursty trace's p99: docs/benchmark-history.md,
  sessions 30 and 31). Only then, not always: the least-loaded of all, always, scattered
  long conversations' first turns away from their walks and lost hit rate on `long`.
  A later turn whose system prompt or tools changed since the turn before (a client writing
  the time into its system prompt, say) has no walk worth keeping: its key changed with its
  head, and a client that changed it once will likely change it again, so two choices would
  only cost balance; it goes to the member with the least work of all.
- A new conversation whose system prompt and tools are most of its first turn (a head held
  or not) follows the head's holders, unless the head opens so many of the endpoint's new
  conversations (Demand) that it needs several members (head_members): then it is placed as
  above, by its own walk, over that many of the first members of the head's walk, and the head
  held there counts as no less work (it will be copied to each). One popular system prompt is
  then copied to every member and its conversations spread evenly; six heads of a sixth each
  stay with their holders, so six large heads do not fill every cache (new_conversations).
  Following its head, a new conversation passes over the members that opened more than their
  share of the endpoint's recent new conversations, and one (Openings; router.proxy): the
  head is copied to a second member only where its holder would take more than its share.
- Otherwise the home (the member holding the longest prefix of the request, the first of several
  in the conversation's walk; else the key's ring owner) stays the choice unless another
  member's cost is lower by more than the margin. A member's cost is the request's estimated
  TTFT there plus the time its prefill there adds to the requests that will queue behind it:
  those waiting there now (by Little's law, over one wait as many arrive as are waiting),
  and those arriving while the prefill runs (the endpoint's recent rate over its members),
  who wait half of it on average. The last grows with the square of what is recomputed: a
  short head is still copied to a member with less queued, but a long history moves only to
  a member far ahead, and less readily the busier the endpoint. Without it an idle member
  drew long histories off caches that kept them: on a pool whose caches held everything such
  moves bought no latency and cost 4-8% of the hit rate (docs/benchmark-history.md, session
  35). What leaving spares the home's queue is not counted: a home's queue in a burst drains
  when the burst passes, and counting it moved more conversations off their caches on the
  bursty trace and lost hit rate there (docs/benchmark-history.md, session 15).
  The margin prices what the cost leaves out. The tokens a move recomputes are lost to the
  hit rate for good, and go into a second cache, where they evict other conversations'
  histories; what it saves is mostly a passing queue (one very long prompt ahead of it, a
  burst), gone by the conversation's next turn. So a move must save `margin` (5) times the
  tokens it recomputes, plus `margin_tokens` of hysteresis: a history leaves its home only
  when it is stuck behind far more work than it holds (a member that joined empty, a home
  that drew too many conversations), and a short shared head (a system prompt, a tenth of a
  second to copy) still leaves holders a second or more behind. At 1, the default until
  session 36, the moves bought no latency any benchmark could tell from its noise and cost
  2 to 3 points of hit rate where a few very long prompts hold members up (the Mooncake trace
  from request 3,393) and 5 points of the bound where caches hold everything
  (docs/benchmark-history.md, session 36).
- On a saturated pool (every candidate has SATURATED_WAITING requests or more waiting for
  their first token) the pool has no idle member for a move to gain from, and every copy of a
  history adds work that the requests queued everywhere wait behind. So there:
  - a request leaves its home only for a member holding as much of it (a move that
    recomputes nothing; what it spares is only queueing). Priced per request, the moves
    recomputing part of a history still went through on the saturated Mooncake window, and
    no moves at all was ahead there in every run but cost where the pool grows, where the
    member that joined has nothing waiting (docs/benchmark-history.md, sessions 25-28 and 34);
  - a conversation whose history the placement index trimmed from a member counts the
    trimmed run as half held there (router.proxy, believed). The engine holds little of it
    (4-12% was measured), so this is no guess about the cache but a bias to return: placed as
    new instead, the history is recomputed into a second cache, where it evicts other
    conversations'. Counted whenever every member had one request waiting, it cost the busy
    but unsaturated window 2000 its latency; counted on any pool, 3 points on a bursty seed
    and 7 on a `long` one (sessions 32-34).
- Ties break by walk order, so replicas with the same membership and the same loads agree;
  and a replica that never saw a conversation's earlier turns presumes them where any replica
  places a new conversation, the first member of its walk (holders).

The estimates are guesses (router.holdings says why); nothing here is trusted beyond choosing.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

DEFAULT_MOVE_MARGIN = 5.0  # routing.moveMargin
SATURATED_TRIMMED = 0.5  # what a trimmed chunk counts for on a saturated pool (believed)
SATURATED_WAITING = 2  # requests waiting on every candidate, at least, for a saturated pool
OPENING_SLACK = 1  # new conversations a member may open beyond its share (Openings)


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
    waiting: float = 0.0  # requests there still waiting for their first token
    arrivals: float = 0.0  # requests per second expected there

    def ttft(self, prompt_tokens: int) -> float:
        """Estimated seconds to the first token of a request of `prompt_tokens` there."""
        return (self.queued_tokens + max(0, prompt_tokens - self.cached_tokens)) / self.rate

    def cost(self, prompt_tokens: int) -> float:
        """Its TTFT there plus the time its prefill adds to the requests that will queue
        behind it: as many as wait there now (by Little's law, arrivals over one wait), and
        those arriving while it runs, delayed by half of it on average."""
        busy = max(0, prompt_tokens - self.cached_tokens) / self.rate
        return self.ttft(prompt_tokens) + busy * (self.waiting + self.arrivals * busy / 2)


def saturated(waiting: Iterable[float]) -> bool:
    """Whether a pool is saturated: every candidate has SATURATED_WAITING requests or more
    waiting for their first token (the module's docstring says what changes then)."""
    return all(n >= SATURATED_WAITING for n in waiting)


def believed(held: Mapping[str, int], trimmed: Mapping[str, int]) -> dict[str, float]:
    """The leading chunks of a request each member is taken to hold: what the placement index
    says it holds, and SATURATED_TRIMMED of the run after that which the index trimmed from it
    (passed on a saturated pool only: the module's docstring says why)."""
    return {m: held.get(m, 0) + SATURATED_TRIMMED * trimmed.get(m, 0) for m in held | trimmed}


def first_of(pool: Collection[str], order: Iterable[str], walk: Sequence[str]) -> str | None:
    """The first member of `pool` in `order` (a conversation's own walk, read lazily), then in
    `walk`; None when `pool` has no member of `walk`."""
    pool = set(pool).intersection(walk)
    if len(pool) <= 1:
        return next(iter(pool), None)
    return next(m for m in itertools.chain(order, walk) if m in pool)


def home_of(held: Mapping[str, int], walk: Sequence[str], order: Iterable[str] = ()) -> str | None:
    """The member of `walk` holding the longest prefix (`held`, in any unit), None if none does.

    Of several holding it (a shared head: a system prompt, tools), the first in `order`, the
    conversation's own walk: conversations sharing a head spread over its holders as their own
    walks spread them, rather than all following the first holder in the key's walk.
    """
    longest = max(held.values(), default=0)
    return first_of((m for m, n in held.items() if longest and n == longest), order, walk)


def holders(
    walk: Sequence[str],
    chars: Mapping[str, int],
    *,
    prompt_tokens: int,
    previous_tokens: int,
    tokens: Callable[[int], int],
    slack_chars: int,
    order: Iterable[str] = (),
    last: str | None = None,
    sent_chars: int = 0,
    lost: bool = False,
) -> tuple[str | None, dict[str, int]]:
    """The request's home among `walk`, and the tokens of it each member there probably holds.

    `chars` is what the placement index says each member holds of the prompt (leading
    characters); `order` is the conversation's own walk. The home is the member holding the
    longest prefix (home_of); when that prefix is held only off the walk (by a member tried,
    ejected or warming) there is no home and the request goes as one without
    (router.placement.decide).

    A later turn whose previous turn this replica sent, to `last` (`sent_chars`, that turn's
    size: router.breaks knows when it is the turn right before this one), has its home there,
    holding the previous prompt and its answer, while the index still holds all of that prompt
    there but less than a chunk (`slack_chars`): the index names whole chunks only, so the
    short turns of a chat with a long system prompt were invisible in it, and each was placed
    as new, often off the member holding its history. Where the index dropped more of it than
    that (the engine evicted it, by the index's guess), `last` is not believed, nor where
    another member holds the whole previous prompt already (the index sees where it is): the
    home is then the member holding the longest prefix, `last` first of several holding as
    much (a head copied to several members, say; router.placement.Openings).

    A later turn whose previous prompt is longer than anything this replica knows of it (by
    more than `slack_chars`) went through another replica: it is presumed, holding the
    previous prompt, on the first member of its conversation's walk, where every replica
    places a new conversation when loads are even (decide). What this replica knows of its
    earlier turns does not change that: another replica, not knowing them, presumed the same
    and may have sent a later turn there, so that every replica's guess converges on one
    member. A turn this replica sent is not presumed so: presumed whole on a member it was
    never sent to, a history the index had trimmed went back to the first member of the
    walk (on `agents`, the conversations opened on a head's second holder, by their third
    turn: the previous turn's answer, counted in the previous prompt, took it past the
    index's view plus a chunk).

    A later turn whose previous one this replica sent to a member whose cache is gone since
    (`lost`: it left the pool, or came back at a new address) is presumed nowhere: this replica
    knows its history is not on the first member of its walk, and presuming it there would pile
    every conversation of the member that left onto the one that takes over its keys, all of
    them computing their histories again behind each other. The index says what is left (a
    head held elsewhere; else nothing, and the turn is placed as a new conversation).
    """
    cached = {m: min(prompt_tokens, tokens(chars[m])) for m in walk if chars.get(m)}
    if lost:
        return home_of(chars, walk, order), cached
    others = max(cached.values(), default=0)
    if sent_chars:  # this replica sent the turn before, to `last`
        seen = chars.get(last, 0) + slack_chars >= sent_chars  # but a tail the index cannot see
        if last in walk and others < previous_tokens and seen:
            cached[last] = previous_tokens
            return last, cached
    elif previous_tokens > tokens(max(chars.values(), default=0) + slack_chars):
        home = first_of(walk, order, walk)
        assert home is not None  # walk is never empty
        cached[home] = max(cached.get(home, 0), previous_tokens)
        return home, cached
    elif last in walk and others < previous_tokens <= tokens(chars.get(last, 0) + slack_chars):
        cached[last] = previous_tokens  # as above, of an earlier turn another replica extended
        return last, cached
    if previous_tokens and last in walk:  # of several holding as much, its previous turn's
        order = itertools.chain((last,), order)
    return home_of(chars, walk, order), cached


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
    *,
    head_tokens: int = 0,
    head_changed: bool = False,
    saturated: bool = False,
) -> Decision:
    """The member for a request; `walk` in the key's ring order, never empty.

    `fresh_order` is where a new conversation may go, in its own ring order (empty: the key's
    walk), read only as far as needed (a lazy walk costs nothing for the others); it takes
    the member with less work of the first two there; of all members when `head_changed` (its
    system prompt or tools since its conversation's previous turn); of all of `fresh_order`
    when both of the two have requests waiting for their first token (a burst: `fresh_order`
    may be a popular head's few members, whose copies it is not to spread further; with none
    to follow it is every member). `head_tokens` is the size
    of its system prompt and tools: a request holding no more is new, and a member holding
    them has no less work for it (the head will be copied to wherever its conversations go).
    On a `saturated` pool a request leaves its home only for a member holding as much of it.
    """
    held = max(c.cached_tokens for c in walk)
    fresh = held <= settings.fresh_below * prompt_tokens or bool(
        settings.fresh_below and held <= head_tokens
    )
    if fresh:
        by_name = {c.name: c for c in walk}
        walked = (by_name[n] for n in fresh_order if n in by_name)
        order = list(itertools.islice(walked, 2))
        if not order:  # no walk of its own: the key's
            walked = iter(walk)
            order = list(itertools.islice(walked, 2))
        order += [c for c in walk if c not in order][: 2 - len(order)]  # off it: walk order
        if head_changed:
            order += [c for c in walk if c not in order]
        elif all(c.waiting > 0 for c in order):  # a burst: the rest of its own walk
            order += walked
        # work in tokens, not time: measured rates differ from replica to replica, and
        # replicas that see the same loads must agree (min keeps the first of equals)
        first = min(order, key=lambda c: c.queued_tokens - max(0, c.cached_tokens - head_tokens))
        return Decision(first.name, moved=False, fresh=True)
    stay = next((c for c in walk if c.name == home), walk[0])
    ahead = [c for c in walk if not saturated or c.cached_tokens >= stay.cached_tokens]
    best = min(ahead, key=lambda c: c.cost(prompt_tokens))
    recomputed = max(0, stay.cached_tokens - best.cached_tokens)
    margin = (settings.margin * recomputed + settings.margin_tokens) / stay.rate
    if best is not stay and best.cost(prompt_tokens) < stay.ttft(prompt_tokens) - margin:
        return Decision(best.name, moved=True, fresh=False)
    return Decision(stay.name, moved=False, fresh=False)


class Recent:
    """How often each item came up among the last `window` added. Bounded; O(1) per update."""

    def __init__(self, window: int = 256) -> None:
        self._recent: collections.deque[str] = collections.deque(maxlen=window)
        self._counts: collections.Counter[str] = collections.Counter()

    def add(self, item: str) -> None:
        if len(self._recent) == self._recent.maxlen:
            oldest = self._recent[0]
            self._counts[oldest] -= 1
            if not self._counts[oldest]:
                del self._counts[oldest]
        self._recent.append(item)
        self._counts[item] += 1

    def count(self, item: str) -> int:
        return self._counts.get(item, 0)

    def __len__(self) -> int:
        return len(self._recent)


class Demand(Recent):
    """Which heads an endpoint's new conversations opened with, over the last `window` of
    them. A head's share of them is the share of the pool its conversations will need, so the
    number of members worth holding a copy of it (head_members)."""

    def __init__(self, window: int = 256, floor: int = 8) -> None:
        super().__init__(window)
        self.floor = floor  # a head seen once in the first few is not yet the whole pool's

    def share(self, head: str) -> float:
        return self.count(head) / max(len(self), self.floor)


class Openings(Recent):
    """Which members an endpoint's new conversations with a head went to, over the last
    `window` of them; `full` names the members that took more than their share.

    Conversations opening with a head kept on few members (six agents of a sixth of the
    traffic each, on four members) follow its holders, so a member holding two heads opens
    twice the conversations of one holding one, and a head drawn more often than the others
    piles onto its holder: the busiest member took 1.33 to 1.69 times the mean (session 39's
    seeds). A conversation's later turns follow it, so its requests are where it opened: a
    member that opened its share plus OPENING_SLACK is passed over by new conversations,
    which copy their head to the next member instead (a fraction of a second of prefill, once
    per member it spreads to). Counted in conversations, not requests in flight: balancing
    by requests in flight moved the busiest seeds little and cost 2 to 5 points of hit rate
    (session 39), as in-flight counts come and go with every turn.
    """

    def full(self, members: int) -> set[str]:
        """The members that opened their share of these conversations, counting the next one,
        plus OPENING_SLACK or more."""
        share = (len(self) + 1) / max(1, members)
        return {m for m, n in self._counts.items() if n >= share + OPENING_SLACK}


def new_conversations(
    *, head_tokens: int, first_tokens: int, share: float, members: int, fresh_below: float
) -> tuple[bool, int]:
    """How a new conversation opening like this request is placed: whether by its own walk,
    and over how many of the first members of its head's walk.

    By its own walk over every member; but one opening with a head that is most of its first
    turn (system prompt, tools) follows the head's holders in the key's walk, like any
    request, unless the head is popular enough to need several members (head_members): then
    it goes by its own walk over that many of the first members of the head's walk. A
    fraction of 0 places every request by the key's walk (the behaviour before `freshBelow`).
    """
    if not fresh_below:
        return False, members
    if head_tokens > fresh_below * first_tokens:
        spread = head_members(share, members)
        return spread > 1, spread
    return True, members


def head_members(share: float, members: int) -> int:
    """Over how many members a head's new conversations are spread: its share of the pool,
    rounded (at least one). A head most conversations open with is copied to every member,
    so they spread evenly; one of six is kept where it is, so six heads do not fill every
    cache. Rounded, not up: a head needs a second member only at one and a half members'
    worth, so that replicas counting a few conversations each agree on one."""
    return max(1, min(members, math.floor(share * members + 0.5)))
