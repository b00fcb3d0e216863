"""Scoring a replay: hit rates, the infinite-cache bound, latency percentiles, spread.

Pure. The bound is the token hit rate one infinite cache per endpoint would reach on exactly
the requests that were sent, in the order they were sent, with the simulator's own tokenizer,
block size and rule that the last prompt token is always computed: no router can beat it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
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


def infinite_cache_hits(
    bodies: Iterable[Mapping[str, Any]], *, block_size: int = 16, salt: int = 0
) -> tuple[int, int]:
    """(cached, prompt) tokens for one unbounded cache per endpoint over these requests."""
    seen: dict[str, set[int]] = {}
    hit = total = 0
    for body in bodies:
        prompt = tokens.render_chat(body["messages"], body.get("tools"))
        hashes = cache.block_hashes(prompt, block_size=block_size, salt=salt)
        known = seen.setdefault(str(body["model"]), set())
        limit = cache.cacheable_blocks(len(prompt), block_size)
        n = 0
        while n < min(limit, len(hashes)) and hashes[n] in known:
            n += 1
        hit += n * block_size
        total += len(prompt)
        known.update(hashes)
    return hit, total


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
