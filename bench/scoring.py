"""Scoring a replay: hit rates, the infinite-cache bound, latency percentiles, spread.

Pure. The bound is the token hit rate one infinite cache per endpoint would reach on exactly
the requests that were sent, in the order they were sent, with the simulator's own tokenizer,
block size and rule that the last prompt token is always computed: no router can beat it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Container, Iterable, Mapping, Sequence
from typing import Any

from kvpin.sim import cache, tokens


@dataclasses.dataclass(frozen=True)
class Record:
    """One request as the benchmark saw it."""

    endpoint: str
    started: float
    ttft_s: float
    prompt_tokens: int
    cached_tokens: int
    ok: bool
    pod: str | None = None
    """The pod that answered, as it named itself (`system_fingerprint`), if it did."""
    request: int | None = None
    """The index of its body among the replay's bodies."""


def _blocks(body: Mapping[str, Any], block_size: int, salt: int) -> tuple[list[int], int]:
    """The hashes of the blocks of a chat body's prompt that can be found cached (the
    simulator's tokenizer and rules), and the prompt's length in tokens."""
    prompt = tokens.render_chat(body["messages"], body.get("tools"))
    hashes = cache.block_hashes(prompt, block_size=block_size, salt=salt)
    return hashes[: cache.cacheable_blocks(len(prompt), block_size)], len(prompt)


def _seen(hashes: Sequence[int], known: Container[int]) -> int:
    """How many leading blocks are `known`."""
    n = 0
    while n < len(hashes) and hashes[n] in known:
        n += 1
    return n


def infinite_cache_hits(
    bodies: Iterable[Mapping[str, Any]], *, block_size: int = 16, salt: int = 0
) -> tuple[int, int]:
    """(cached, prompt) tokens for one unbounded cache per endpoint over these requests."""
    seen: dict[str, set[int]] = {}
    hit = total = 0
    for body in bodies:
        hashes, length = _blocks(body, block_size, salt)
        known = seen.setdefault(str(body["model"]), set())
        hit += _seen(hashes, known) * block_size
        total += length
        known.update(hashes)
    return hit, total


@dataclasses.dataclass(frozen=True)
class Affinity:
    """Where a policy sent requests whose prefix had been sent before, and what they found.

    A hit rate below the bound is lost in one of two places: requests sent away from the pods
    that had their prefix (`followed` low), or pods that no longer held it when they came back
    (`kept` low: evicted, or not computed yet). Two policies with the same hit rate can lose it
    in opposite ways: one sticks and thrashes its caches, the other spreads and recomputes.
    """

    prefixed: int  # requests whose leading blocks an earlier request had sent
    followed: float  # of those, the share sent to a pod their prefix had been sent to
    kept: float  # of the prefix tokens of those that followed, the share found cached there


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where one request went, against what earlier requests of the replay had sent."""

    record: Record
    prefix_tokens: int
    """Leading tokens of its prompt that earlier answered requests had sent (to any pod): what
    one unbounded cache per endpoint would have held, in the order this replay sent them."""
    followed: bool
    """Sent to a pod its prefix had been sent to (False when nothing of it had been sent)."""


def placements(
    records: Iterable[Record],
    bodies: Sequence[Mapping[str, Any]],
    *,
    block_size: int = 16,
    salt: int = 0,
) -> list[Placement]:
    """Every request of one replay with a body (`request`), in the order they were sent. Only
    requests answered by a pod that named itself (`kvpin sim --pod-name`) count as having sent
    their blocks anywhere."""
    ordered = sorted((r for r in records if r.request is not None), key=lambda r: r.started)
    sent: dict[str, dict[int, set[str]]] = {}  # endpoint -> block -> pods it was sent to
    out = []
    for r in ordered:
        assert r.request is not None
        hashes, _ = _blocks(bodies[r.request], block_size, salt)
        pods_of = sent.setdefault(r.endpoint, {})
        n = _seen(hashes, pods_of)
        out.append(Placement(r, n * block_size, bool(n) and r.pod in pods_of[hashes[n - 1]]))
        if r.ok and r.pod is not None:
            for h in hashes:
                pods_of.setdefault(h, set()).add(r.pod)
    return out


def affinity(placed: Iterable[Placement]) -> Affinity | None:
    """The affinity of one replay (its placements); None when no pod named itself."""
    answered = [p for p in placed if p.record.ok and p.record.pod is not None]
    if not answered:
        return None
    prefixed = [p for p in answered if p.prefix_tokens]
    followed = [p for p in prefixed if p.followed]
    prefix_tokens = sum(p.prefix_tokens for p in followed)
    kept_tokens = sum(min(p.record.cached_tokens, p.prefix_tokens) for p in followed)
    return Affinity(
        prefixed=len(prefixed),
        followed=len(followed) / len(prefixed) if prefixed else math.nan,
        kept=kept_tokens / prefix_tokens if prefix_tokens else math.nan,
    )


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (nearest rank)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]


def spread(counts: Mapping[str, int]) -> float:
    """max / mean requests per pod (1.0 is perfectly even)."""
    if not counts or not sum(counts.values()):
        return math.nan
    mean = sum(counts.values()) / len(counts)
    return max(counts.values()) / mean


@dataclasses.dataclass(frozen=True)
class Summary:
    """One policy's figures."""

    policy: str
    requests: int
    errors: int
    hit_rate: float
    bound: float
    ttft_p50_s: float
    ttft_p99_s: float
    ttft_mean_s: float
    makespan_s: float
    throughput_rps: float
    spread: float
    prefix_breaks: int | None = None
    """Turns the kvpin router saw break their conversation's prefix (None: not measured)."""
    left_home: int | None = None
    """Requests the kvpin router sent off their home: moved by the cost rule, or spilled over
    the loadFactor cap (None: not measured). What placement traded hit rate for."""
    prefill_tokens: int = 0
    """Prompt tokens the pool computed (not found cached): what a GPU bill follows."""
    ttft_p90_s: float = math.nan
    followed: float = math.nan
    """Of the requests whose prefix had been sent before, the share sent where it had gone."""
    kept: float = math.nan
    """Of the prefix tokens of those, the share the pod still held (Affinity)."""
    rounds: int = 1
    """Runs these figures are the mean of (combine)."""

    @property
    def of_bound(self) -> float:
        return self.hit_rate / self.bound if self.bound else math.nan


def summarize(
    policy: str,
    records: Sequence[Record],
    *,
    bound: tuple[int, int],
    makespan_s: float,
    per_pod: Mapping[str, int],
    prefix_breaks: int | None = None,
    left_home: int | None = None,
    placed: Affinity | None = None,
) -> Summary:
    """The figures of one replay."""
    ok = [r for r in records if r.ok]
    prompt = sum(r.prompt_tokens for r in ok)
    ttfts = [r.ttft_s for r in ok]
    return Summary(
        policy=policy,
        requests=len(records),
        errors=len(records) - len(ok),
        hit_rate=sum(r.cached_tokens for r in ok) / prompt if prompt else math.nan,
        bound=bound[0] / bound[1] if bound[1] else math.nan,
        ttft_p50_s=percentile(ttfts, 50),
        ttft_p99_s=percentile(ttfts, 99),
        ttft_mean_s=sum(ttfts) / len(ttfts) if ttfts else math.nan,
        makespan_s=makespan_s,
        throughput_rps=len(ok) / makespan_s if makespan_s else math.nan,
        spread=spread(per_pod),
        prefix_breaks=prefix_breaks,
        left_home=left_home,
        prefill_tokens=prompt - sum(r.cached_tokens for r in ok),
        ttft_p90_s=percentile(ttfts, 90),
        followed=placed.followed if placed else math.nan,
        kept=placed.kept if placed else math.nan,
    )


def combine(summaries: Sequence[Summary]) -> list[Summary]:
    """Each policy's runs (rounds of one benchmark) -> one summary per policy, in the order the
    policies first ran: every figure the mean of its runs, except requests and errors, which are
    summed (an error in one round does not hide in a mean)."""
    by_policy: dict[str, list[Summary]] = {}
    for s in summaries:
        by_policy.setdefault(s.policy, []).append(s)
    return [_mean(runs) if len(runs) > 1 else runs[0] for runs in by_policy.values()]


def _mean(runs: Sequence[Summary]) -> Summary:
    def mean(name: str) -> Any:
        values = [getattr(r, name) for r in runs]
        if any(v is None for v in values):
            return None
        average = sum(values) / len(values)
        return round(average) if isinstance(values[0], int) else average

    summed = {"requests", "errors"}
    figures = {f.name: mean(f.name) for f in dataclasses.fields(Summary)
               if f.name not in summed | {"policy", "rounds"}}  # fmt: skip
    return Summary(
        policy=runs[0].policy, rounds=len(runs), **figures,
        **{name: sum(getattr(r, name) for r in runs) for name in summed},
    )  # fmt: skip
