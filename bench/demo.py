"""`kvpin demo`: the effect as users live it, in one screen.

1. The two-call check, through a kvpin router with the official `openai` client: the first
   call with a long system prompt finds nothing cached, the second finds nearly all of it.
2. The policy table on the `agentic` workload (bench.workloads), with the prefill tokens each
   policy made the pool compute (what a GPU bill follows).
3. A careless client that writes the time into its system prompt every turn, named by the
   router's prefix-break metric.

I/O: starts and stops its own simulators and routers (bench.processes), also on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import re
import urllib.request
from collections.abc import Iterator, Sequence

import openai
import yaml

from kvpin.bench import processes, scoring

ENDPOINT = "ep-demo"
SYSTEM = "You are the support agent of a large online shop. Be precise and kind. " * 80
_BREAKS = re.compile(r'^kvpin_router_prefix_breaks_total\{[^}]*zone="(\w+)"[^}]*\} ([\d.e+]+)$',
                     re.MULTILINE)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class TwoCalls:
    prompt_tokens: tuple[int, int]
    cached_tokens: tuple[int, int]  # usage.prompt_tokens_details.cached_tokens of each call
    hit_tokens: tuple[int, int]  # DeepSeek-style usage.prompt_cache_hit_tokens of each call


@dataclasses.dataclass(frozen=True)
class Careless:
    turns: int
    breaks: dict[str, int]  # by zone, from the router's /metrics
    cached_tokens: int  # over all its turns


@contextlib.contextmanager
def _router(pods: int, tmp: str) -> Iterator[str]:
    """`pods` simulators behind one kvpin router; the router's URL."""
    with contextlib.ExitStack() as stack:
        urls = []
        for _ in range(pods):
            port = processes.free_port()
            urls.append(f"http://127.0.0.1:{port}")
            stack.enter_context(processes.running(
                [*processes.kvpin_command(), "sim", "--port", str(port), "--served-model-name",
                 ENDPOINT, "--time-scale", "0", "--log-level", "WARNING"],
                health_url=f"{urls[-1]}/health",
            ))  # fmt: skip
        config = pathlib.Path(tmp) / "demo-router.yaml"
        config.write_text(yaml.safe_dump({"endpoints": {ENDPOINT: {"members": urls}}}))
        port = processes.free_port()
        router = f"http://127.0.0.1:{port}"
        stack.enter_context(processes.running(
            [*processes.kvpin_command(), "router", "--config", str(config), "--host", "127.0.0.1",
             "--port", str(port), "--log-level", "WARNING"],
            health_url=f"{router}/readyz",
        ))  # fmt: skip
        yield router


def two_calls(client: openai.OpenAI) -> TwoCalls:
    """The same long system prompt twice, with different questions."""
    usages = []
    for question in ("What is your return policy?", "Do you ship to Norway?"):
        response = client.chat.completions.create(
            model=ENDPOINT, max_tokens=8,
            messages=[{"role": "system", "content": SYSTEM},
                      {"role": "user", "content": question}],
        )  # fmt: skip
        usages.append(response.usage)
    return TwoCalls(
        tuple(u.prompt_tokens for u in usages),  # type: ignore[arg-type]
        tuple(u.prompt_tokens_details.cached_tokens for u in usages),  # type: ignore[arg-type]
        tuple((u.model_extra or {}).get("prompt_cache_hit_tokens", 0) for u in usages),  # type: ignore[arg-type]
    )


def careless(client: openai.OpenAI, router: str, turns: int = 4) -> Careless:
    """A client that puts the time in its system prompt: every turn breaks the prefix."""
    history: list[dict[str, str]] = []
    cached = 0
    for turn in range(turns):
        system = f"Current time: 12:00:{turn:02d}. {SYSTEM}"
        history.append({"role": "user", "content": f"question {turn}"})
        response = client.chat.completions.create(
            model=ENDPOINT, max_tokens=8, user="careless-client",
            messages=[{"role": "system", "content": system}, *history],
        )  # fmt: skip
        cached += response.usage.prompt_tokens_details.cached_tokens  # type: ignore[union-attr]
        history.append({"role": "assistant", "content": response.choices[0].message.content})
    with urllib.request.urlopen(f"{router}/metrics", timeout=5) as r:
        text = r.read().decode()
    breaks: dict[str, int] = {}
    for zone, value in _BREAKS.findall(text):
        breaks[zone] = breaks.get(zone, 0) + int(float(value))
    return Careless(turns, breaks, cached)


def checks(tmp: str) -> tuple[TwoCalls, Careless]:
    """Steps 1 and 3, on two simulators behind one router."""
    with _router(2, tmp) as router:
        client = openai.OpenAI(base_url=f"{router}/v1", api_key="none", max_retries=0)
        return two_calls(client), careless(client, router)


def verdict(summaries: Sequence[scoring.Summary]) -> str:
    """One honest sentence on kvpin against the best other policy."""
    kvpin = next((s for s in summaries if s.policy == "kvpin"), None)
    others = [s for s in summaries if s.policy != "kvpin"]
    if kvpin is None or not others:
        return ""
    best = max(others, key=lambda s: s.hit_rate)
    fastest = min(others, key=lambda s: s.ttft_p50_s)
    parts = [
        f"kvpin found {kvpin.hit_rate:.0%} of prompt tokens cached against {best.policy}'s "
        f"{best.hit_rate:.0%}, and made the pool compute "
        f"{kvpin.prefill_tokens / max(1, best.prefill_tokens):.2f}x its prefill tokens"
    ]
    if kvpin.ttft_p50_s <= fastest.ttft_p50_s and kvpin.ttft_p99_s <= fastest.ttft_p99_s:
        parts.append(f"with the lowest TTFT p50 and p99 ({kvpin.ttft_p50_s * 1e3:.0f} / "
                     f"{kvpin.ttft_p99_s * 1e3:.0f} ms)")  # fmt: skip
    else:
        parts.append(
            f"TTFT p50/p99 {kvpin.ttft_p50_s * 1e3:.0f}/{kvpin.ttft_p99_s * 1e3:.0f} ms against "
            f"{fastest.policy}'s {fastest.ttft_p50_s * 1e3:.0f}/{fastest.ttft_p99_s * 1e3:.0f} "
            "ms: on two shared cores the simulated engines are fast, so recomputing costs little "
            "time while queueing behind a busy pod costs more"
        )
    return "; ".join(parts) + "."
