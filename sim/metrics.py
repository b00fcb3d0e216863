"""The simulator's Prometheus metrics, with vLLM's names, one registry per server.

Several simulators run in one test process, so each gets its own CollectorRegistry rather than
the global one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class SimMetrics:
    """Every metric of one simulator, already labelled with its model (one lookup, not one
    per request)."""

    registry: CollectorRegistry
    queries: Counter
    hits: Counter
    ttft: Histogram
    prompt_tokens: Counter
    generation_tokens: Counter
    finished: Counter


def build_metrics(
    model: str,
    *,
    usage: Callable[[], float],
    running: Callable[[], float],
    waiting: Callable[[], float],
    blocks: int,
    block_size: int,
) -> SimMetrics:
    """Create the metrics; gauges read the engine through the callbacks at scrape time."""
    registry = CollectorRegistry()
    labels = ["model_name"]

    def gauge(name: str, doc: str, read: Callable[[], float]) -> None:
        Gauge(name, doc, labels, registry=registry).labels(model).set_function(read)

    gauge("vllm:kv_cache_usage_perc", "KV-cache usage: 1 means 100 percent.", usage)
    gauge("vllm:num_requests_running", "Requests in the running batch.", running)
    gauge("vllm:num_requests_waiting", "Requests waiting to be admitted.", waiting)
    info = Gauge("vllm:cache_config_info", "Information of the KV cache's configuration.",
                 [*labels, "block_size", "num_gpu_blocks"], registry=registry)  # fmt: skip
    info.labels(model, str(block_size), str(blocks)).set(1)

    def counter(name: str, doc: str) -> Counter:
        return Counter(name, doc, labels, registry=registry).labels(model)

    return SimMetrics(
        registry=registry,
        queries=counter("vllm:prefix_cache_queries", "Prompt tokens looked up in the cache."),
        hits=counter("vllm:prefix_cache_hits", "Prompt tokens found in the cache."),
        ttft=Histogram(
            "vllm:time_to_first_token_seconds",
            "Time to first token.",
            labels,
            buckets=TTFT_BUCKETS,
            registry=registry,
        ).labels(model),
        prompt_tokens=counter("vllm:prompt_tokens", "Prompt tokens processed."),
        generation_tokens=counter("vllm:generation_tokens", "Tokens generated."),
        finished=Counter(
            "vllm:request_success",
            "Finished requests.",
            [*labels, "finished_reason"],
            registry=registry,
        ).labels(model, "length"),
    )
