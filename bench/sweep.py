"""The load sweep: the agentic workload at rising arrival rates, every policy at each, so each
policy's saturation knee shows (how serving benchmarks are read: latency against offered load).

The pool, its caches and the conversations' shapes stay the same at every rate; conversations
keep arriving for the same `duration_s` at each rate (so a higher rate is a higher sustained
load, not the same conversations squeezed together). A rate's table rows and the chart come
from the same summaries as `kvpin bench workload` (bench.scoring).
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
from collections.abc import Callable, Sequence

from kvpin.bench import runner, scoring

Point = tuple[float, scoring.Summary]  # (conversations per second, one policy's figures)


def run(
    config: runner.BenchConfig,
    rates: Sequence[float],
    *,
    duration_s: float,
    progress: Callable[[str, int, int], None] = lambda p, d, t: None,
) -> list[Point]:
    """Every policy at every rate, lowest rate first."""
    out: list[Point] = []
    for rate in sorted(rates):
        workload = dataclasses.replace(
            config.workload, arrival_rate=rate, conversations=max(1, round(rate * duration_s))
        )
        at_rate = dataclasses.replace(config, workload=workload)
        out += [(rate, s) for s in runner.run(at_rate, progress=progress)]
    return out


def markdown(points: Sequence[Point]) -> str:
    lines = [
        "| conversations/s | policy | requests/s | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms "
        "| token hit rate | prefill tokens | rejected |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for rate, s in points:
        lines.append(
            f"| {rate:g} | {s.policy} | {s.throughput_rps:.1f} | {s.ttft_p50_s * 1e3:.0f} "
            f"| {s.ttft_p90_s * 1e3:.0f} | {s.ttft_p99_s * 1e3:.0f} | {s.hit_rate:.1%} "
            f"| {s.prefill_tokens:,} | {s.errors} |"
        )
    return "\n".join(lines)


def chart(points: Sequence[Point], path: pathlib.Path) -> bool:
    """TTFT p50 and p90 against load per policy, and rejected requests; False without
    matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    policies = list(dict.fromkeys(s.policy for _, s in points))
    fig, (latency, rejected) = plt.subplots(1, 2, figsize=(13, 5))
    for i, policy in enumerate(policies):
        mine = [(rate, s) for rate, s in points if s.policy == policy]
        rates = [rate for rate, _ in mine]
        color = f"C{i}"
        latency.plot(rates, [s.ttft_p50_s * 1e3 for _, s in mine], "o-", color=color,
                     label=f"{policy} p50")  # fmt: skip
        latency.plot(rates, [s.ttft_p90_s * 1e3 for _, s in mine], "s--", color=color,
                     label=f"{policy} p90")  # fmt: skip
        rejected.plot(rates, [s.errors for _, s in mine], "o-", color=color, label=policy)
    latency.set(xlabel="conversations arriving per second", ylabel="TTFT, ms", yscale="log",
                title="time to first token against load")  # fmt: skip
    rejected.set(xlabel="conversations arriving per second", ylabel="requests",
                 title="rejected requests")  # fmt: skip
    rejected.set_ylim(bottom=0, top=max(1, *(s.errors for _, s in points)) * 1.1)
    latency.legend(fontsize=7)
    rejected.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def knee(points: Sequence[Point], policy: str, *, factor: float = 3.0) -> float | None:
    """The lowest rate at which `policy`'s TTFT p90 exceeds `factor` x its p90 at the lowest
    rate (None: it never does in this sweep)."""
    mine = [(rate, s.ttft_p90_s) for rate, s in points if s.policy == policy]
    if not mine or math.isnan(mine[0][1]):
        return None
    base = mine[0][1]
    return next((rate for rate, p90 in mine if p90 > factor * base), None)
