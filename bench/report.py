"""Benchmark results as a markdown table, JSON, and (with matplotlib) a PNG chart."""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kvpin.bench.scoring import Placement, Summary


def markdown(summaries: Sequence[Summary]) -> str:
    """One row per policy."""
    lines = [
        "| policy | token hit rate | infinite-cache bound | of bound | TTFT p50 ms | TTFT p99 ms "
        "| TTFT mean ms | prefill tokens | makespan s | req/s | spread (max/mean) "
        "| prefix breaks | left home | followed | kept | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summaries:
        of_bound = _share(s.of_bound)
        lines.append(
            f"| {s.policy} | {s.hit_rate:.1%} | {s.bound:.1%} | {of_bound} "
            f"| {s.ttft_p50_s * 1e3:.1f} | {s.ttft_p99_s * 1e3:.1f} | {s.ttft_mean_s * 1e3:.1f} "
            f"| {s.prefill_tokens:,} | {s.makespan_s:.2f} "
            f"| {s.throughput_rps:.1f} | {s.spread:.2f} "
            f"| {_count(s.prefix_breaks)} | {_count(s.left_home)} "
            f"| {_share(s.followed)} | {_share(s.kept)} | {s.errors} |"
        )
    return "\n".join(lines)


def _share(x: float) -> str:
    return "—" if math.isnan(x) else f"{x:.1%}"


def _count(n: int | None) -> str:
    return "—" if n is None else str(n)


def noise(summaries: Sequence[Summary]) -> str:
    """For each policy run more than once, the lowest and highest of its figures over the runs:
    a difference between two policies inside these ranges is not a result."""
    by_policy: dict[str, list[Summary]] = {}
    for s in summaries:
        by_policy.setdefault(s.policy, []).append(s)
    columns = (("token hit rate", lambda s: s.hit_rate, "{:.1%}"),
               ("TTFT p99 ms", lambda s: s.ttft_p99_s * 1e3, "{:.1f}"),
               ("TTFT mean ms", lambda s: s.ttft_mean_s * 1e3, "{:.1f}"),
               ("makespan s", lambda s: s.makespan_s, "{:.2f}"),
               ("spread (max/mean)", lambda s: s.spread, "{:.2f}"))  # fmt: skip
    names = " | ".join(f"{name} (lowest to highest)" for name, _, _ in columns)
    lines = [f"| policy | runs | {names} |", "|---|---:|" + "---:|" * len(columns)]
    for policy, runs in by_policy.items():
        if len(runs) < 2:
            continue
        cells = []
        for _, figure, form in columns:
            values = [figure(r) for r in runs]
            cells.append(f"{form.format(min(values))} to {form.format(max(values))}")
        lines.append(f"| {policy} | {len(runs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def across_seeds(per_seed: Mapping[int, Sequence[Summary]]) -> str:
    """Each policy over several seeds of one workload: its mean figures, its lowest and
    highest hit rate, and on how many seeds it had the highest hit rate and the lowest mean
    and p99 TTFT of every policy run (ties count for each). One seed's lead can be the luck
    of a few placements in a short replay; a rule is better when it leads on most seeds."""
    runs: dict[str, list[Summary]] = {}
    for summaries in per_seed.values():
        for s in summaries:
            runs.setdefault(s.policy, []).append(s)

    def leads(policy: str, figure: Callable[[Summary], float]) -> int:
        return sum(
            any(s.policy == policy and figure(s) == min(map(figure, summaries)) for s in summaries)
            for summaries in per_seed.values()
        )

    lines = [
        "| policy | seeds | token hit rate (mean) | lowest to highest | highest on | "
        "TTFT mean ms (mean) | lowest on | TTFT p99 ms (mean) | lowest on | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for policy, rs in runs.items():
        hits = [r.hit_rate for r in rs]
        lines.append(
            f"| {policy} | {len(rs)} | {statistics.fmean(hits):.1%} "
            f"| {min(hits):.1%} to {max(hits):.1%} | {leads(policy, lambda s: -s.hit_rate)} "
            f"| {statistics.fmean(r.ttft_mean_s for r in rs) * 1e3:.1f} "
            f"| {leads(policy, lambda s: s.ttft_mean_s)} "
            f"| {statistics.fmean(r.ttft_p99_s for r in rs) * 1e3:.1f} "
            f"| {leads(policy, lambda s: s.ttft_p99_s)} | {sum(r.errors for r in rs)} |"
        )
    return "\n".join(lines)


def to_json(summaries: Sequence[Summary]) -> str:
    """The summaries as JSON (NaN as null)."""
    rows = [
        {k: (None if isinstance(v, float) and math.isnan(v) else v)
         for k, v in {**dataclasses.asdict(s), "of_bound": s.of_bound}.items()}
        for s in summaries
    ]  # fmt: skip
    return json.dumps(rows, indent=2)


def request_rows(policy: str, placed: Sequence[Placement], **labels: Any) -> list[dict[str, Any]]:
    """One row per request of one policy's run, in the order sent (`--records`): where it
    went, what it found cached, and how much of it earlier requests had sent, to read a hit
    rate request by request against another policy's. Sizes and times only, no prompt text."""
    start = min((p.record.started for p in placed), default=0.0)
    return [
        {"policy": policy, **labels, "request": r.request, "endpoint": r.endpoint,
         "sent_s": round(r.started - start, 4), "ok": r.ok, "pod": r.pod,
         "ttft_s": round(r.ttft_s, 4), "prompt_tokens": r.prompt_tokens,
         "cached_tokens": r.cached_tokens, "prefix_tokens": p.prefix_tokens,
         "followed": p.followed}
        for p in placed
        for r in (p.record,)
    ]  # fmt: skip


def chart(summaries: Sequence[Summary], path: pathlib.Path) -> bool:
    """Write a PNG of hit rate (against the bound), TTFT p99 and spread; False without
    matplotlib (`pip install 'kvpin[charts]'`)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    names = [s.policy for s in summaries]
    fig, axes = plt.subplots(1, 3, figsize=(14, 5))
    axes[0].bar(names, [s.hit_rate * 100 for s in summaries], color="#4c72b0")
    axes[0].axhline(summaries[0].bound * 100, color="black", linestyle="--", label="bound")
    axes[0].set_title("token hit rate, %")
    axes[0].legend()
    axes[1].bar(names, [s.ttft_p99_s * 1e3 for s in summaries], color="#dd8452")
    axes[1].set_title("TTFT p99, ms")
    axes[2].bar(names, [s.spread for s in summaries], color="#55a868")
    axes[2].axhline(1.15, color="black", linestyle="--", label="target 1.15")
    axes[2].set_title("load spread, max/mean")
    axes[2].legend()
    for ax in axes:
        ax.tick_params(axis="x", rotation=40)
        plt.setp(ax.get_xticklabels(), ha="right", rotation_mode="anchor")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
