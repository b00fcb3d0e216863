"""Lifecycle scenarios: the pool changes while a benchmark runs.

`scale` (the only one so far) starts with n-1 of n pods, adds the nth a third of the way in,
restarts one two thirds of the way in (a rollout step: it comes back cold, at a new address,
under the same name) and removes one near the end. Every policy gets the same changes at the
same points of its run (counted in requests answered): the kvpin routers by their static file
(reloaded as a CachedEndpoint's status would be watched), the peers by their worker API, the
client-side baselines and the oracle directly. A pod that leaves keeps serving what it was sent
(as a pod draining in its preStop delay would); requests sent after the change go elsewhere.

The plan and the scoring per phase are pure; `follow` applies the plan while a replay runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Mapping, Sequence

from kvpin.bench import scoring, targets

SCENARIOS = ("scale",)
PHASES = ("start", "after join", "after restart", "after leave")


@dataclasses.dataclass(frozen=True)
class Change:
    at: float  # the fraction of the run's requests answered when it happens
    kind: str  # join, restart or leave


SCALE = (Change(1 / 3, "join"), Change(2 / 3, "restart"), Change(5 / 6, "leave"))


def members_after(urls: Sequence[str], changes: int) -> dict[str, str]:
    """The pool (pod name -> URL) after the first `changes` of SCALE.

    `urls` are the n pods' addresses and one spare, where the restarted pod comes back.
    """
    *pods, spare = urls
    members = {f"pod-{i}": url for i, url in enumerate(pods[:-1])}
    if changes >= 1:  # join
        members[f"pod-{len(pods) - 1}"] = pods[-1]
    if changes >= 2:  # restart: pod-0 comes back cold at the spare's address
        members["pod-0"] = spare
    if changes >= 3:  # leave
        del members["pod-1"]
    return members


def phases(records: Sequence[scoring.Record], times: Sequence[float]) -> list[list[scoring.Record]]:
    """The records of each phase: sent before the first change, between changes, after."""
    out: list[list[scoring.Record]] = [[] for _ in range(len(times) + 1)]
    for record in records:
        out[sum(1 for t in times if record.started >= t)].append(record)
    return out


@dataclasses.dataclass(frozen=True)
class PhaseFigures:
    requests: int
    hit_rate: float
    ttft_p99_s: float


def figures(records: Sequence[scoring.Record]) -> PhaseFigures:
    ok = [r for r in records if r.ok]
    prompt = sum(r.prompt_tokens for r in ok)
    return PhaseFigures(
        len(records),
        sum(r.cached_tokens for r in ok) / prompt if prompt else math.nan,
        scoring.percentile([r.ttft_s for r in ok], 99),
    )


def markdown(rows: Sequence[tuple[scoring.Summary, Sequence[PhaseFigures]]]) -> str:
    """One row per policy: the whole run, then hit rate and TTFT p99 in each phase."""
    head = " | ".join(f"{p}: hit / p99 ms" for p in PHASES)
    lines = [f"| policy | hit rate | TTFT p99 ms | {head} | errors |",
             "|---|---:|---:|" + "---:|" * len(PHASES) + "---:|"]  # fmt: skip
    for summary, per_phase in rows:
        cells = " | ".join(
            f"{f.hit_rate:.1%} / {f.ttft_p99_s * 1e3:.0f}" if f.requests else "—"
            for f in [*per_phase, *[PhaseFigures(0, math.nan, math.nan)] * len(PHASES)][
                : len(PHASES)
            ]
        )
        p99 = summary.ttft_p99_s * 1e3
        lines.append(f"| {summary.policy} | {summary.hit_rate:.1%} | {p99:.0f} | {cells} "
                     f"| {summary.errors} |")  # fmt: skip
    return "\n".join(lines)


class Answered:
    """Requests answered so far in a run, awaitable (the replay ticks it)."""

    def __init__(self) -> None:
        self.count = 0
        self._moved = asyncio.Event()

    def tick(self, n: int) -> None:
        self.count += n
        self._moved.set()

    async def reach(self, n: float) -> None:
        while self.count < n:
            self._moved.clear()
            await self._moved.wait()


async def follow(
    target: targets.Target,
    pools: Mapping[str, Sequence[str]],
    *,
    answered: Answered,
    total: int,
    times: list[float],
) -> None:
    """Apply SCALE to `target` as the run reaches each point; when each change was made goes
    to `times`. The caller cancels it if the replay ends first."""
    for k, change in enumerate(SCALE, start=1):
        await answered.reach(change.at * total)
        times.append(time.monotonic())
        for endpoint, urls in pools.items():
            await target.reconfigure(endpoint, members_after(urls, k))
