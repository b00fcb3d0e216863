"""The workload benchmark: a pool of simulators per endpoint, each policy in turn in front of
the same pools, the same conversations replayed through each, scored against the bound.

I/O: starts and stops every process itself (also on Ctrl-C: they are context-managed and get
SIGINT). Between policies the simulators' caches are flushed, so each policy starts cold.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import pathlib
import re
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator, Sequence

import yaml

from kvpin.bench import processes, replay, router_throughput, scoring, targets, traces, workloads
from kvpin.router import placement

KVPIN_POLICIES = ("kvpin", "kvpin-session", "kvpin-endpoint", "kvpin-x3")
REPLICAS = {"kvpin-x3": 3}  # router replicas behind a round-robin client
PEER_POLICIES = (
    "sglang-router:cache_aware", "sglang-router:round_robin",
    "vllm-router:cache_aware", "vllm-router:consistent_hash",
)  # fmt: skip
DEFAULT_POLICIES = ("kvpin", "random", "round-robin", "least-inflight")
_SUCCESS = re.compile(r"^vllm:request_success_total\{[^}]*\} ([\d.e+]+)$", re.MULTILINE)
_BREAKS = re.compile(r"^kvpin_router_prefix_breaks_total\{[^}]*\} ([\d.e+]+)$", re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    """Everything one benchmark run varies."""

    workload: workloads.WorkloadConfig = dataclasses.field(default_factory=workloads.WorkloadConfig)
    pods: int = 4
    """Simulators per endpoint."""
    cache_blocks: int = 600
    """KV-cache blocks of 16 tokens per simulator (a 40Gi reservation of an 8B model is 20,480)."""
    prefill_tps: float = 10_000.0
    decode_tps: float = 50.0
    time_scale: float = 0.25
    max_model_len: int = 262_144
    """The simulators' context length (the public trace has prompts of up to 191k tokens)."""
    concurrency: int = 8
    prefix_chars: int = 2048
    """The kvpin router's `routing.prefixChars`."""
    load_factor: float = 2.0
    """The kvpin router's `routing.loadFactor`."""
    move_margin: float = 0.25
    """The kvpin router's `routing.moveMargin`."""
    policies: tuple[str, ...] = DEFAULT_POLICIES


def available_policies(policies: Sequence[str]) -> list[str]:
    """The requested policies whose software is installed (peers are optional)."""
    out = []
    for policy in policies:
        name = policy.split(":")[0]
        if policy in PEER_POLICIES and router_throughput.find_peer(name) is None:
            continue
        out.append(policy)
    return out


def _scrape_sum(url: str, pattern: re.Pattern[str]) -> int:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
        return int(sum(float(v) for v in pattern.findall(r.read().decode())))


def _requests_served(url: str) -> int:
    return _scrape_sum(url, _SUCCESS)


def _flush(url: str) -> None:
    request = urllib.request.Request(f"{url}/reset_prefix_cache", method="POST")
    with urllib.request.urlopen(request, timeout=5):
        pass


@contextlib.contextmanager
def _pools(config: BenchConfig, endpoints: Sequence[str]) -> Iterator[dict[str, list[str]]]:
    with contextlib.ExitStack() as stack:
        pools: dict[str, list[str]] = {}
        for endpoint in endpoints:
            for _ in range(config.pods):
                port = processes.free_port()
                url = f"http://127.0.0.1:{port}"
                command = [
                    *processes.kvpin_command(), "sim", "--port", str(port),
                    "--served-model-name", endpoint, "--kv-cache-blocks", str(config.cache_blocks),
                    "--prefill-tps", str(config.prefill_tps),
                    "--decode-tps", str(config.decode_tps),
                    "--time-scale", str(config.time_scale), "--log-level", "WARNING",
                    "--max-model-len", str(config.max_model_len), "--debug-routes",
                ]  # fmt: skip
                stack.enter_context(processes.running(command, health_url=f"{url}/health"))
                pools.setdefault(endpoint, []).append(url)
        yield pools


@contextlib.contextmanager
def _target(
    policy: str, pools: dict[str, list[str]], tmp: pathlib.Path, *, routing: dict[str, float]
) -> Iterator[targets.Target]:
    if policy in targets.BASELINES:
        yield targets.Baseline(policy, pools)
        return
    if policy == "oracle":
        yield targets.Oracle(pools, costs=placement.CostSettings(),
                             prefix_chars=int(routing["prefixChars"]))  # fmt: skip
        return
    if policy in KVPIN_POLICIES:
        key = policy.partition("-")[2] if policy in ("kvpin-session", "kvpin-endpoint") else ""
        config = tmp / f"{policy}.yaml"
        config.write_text(yaml.safe_dump({"endpoints": {
            ep: {"members": urls, "routing": {"key": key or "prefix", **routing}}
            for ep, urls in pools.items()}}))  # fmt: skip
        with contextlib.ExitStack() as stack:
            urls = []
            for _ in range(REPLICAS.get(policy, 1)):
                port = processes.free_port()
                urls.append(f"http://127.0.0.1:{port}")
                stack.enter_context(processes.running(
                    [*processes.kvpin_command(), "router", "--config", str(config), "--host",
                     "127.0.0.1", "--port", str(port), "--log-level", "WARNING"],
                    health_url=f"{urls[-1]}/readyz",
                ))  # fmt: skip
            yield targets.Routed(dict.fromkeys(pools, urls))
        return
    name, _, peer_policy = policy.partition(":")
    executable = router_throughput.find_peer(name)
    if executable is None:
        raise SystemExit(f"{name} is not installed (pip install {name})")
    with contextlib.ExitStack() as stack:
        urls = {}
        for endpoint, members in pools.items():
            port = processes.free_port()
            command = [executable, *(["launch"] if name == "sglang-router" else []),
                       "--host", "127.0.0.1", "--port", str(port), "--policy", peer_policy,
                       "--prometheus-port", str(processes.free_port()),
                       "--log-level", "warn" if name == "sglang-router" else "warning",
                       "--worker-urls", *members]  # fmt: skip
            stack.enter_context(
                processes.running(command, health_url=f"http://127.0.0.1:{port}/health")
            )
            urls[endpoint] = f"http://127.0.0.1:{port}"
        yield targets.Routed(urls)


Drive = Callable[[targets.Target, Callable[[int], None]], Awaitable[replay.Replay]]


def _each_policy(
    config: BenchConfig,
    endpoints: Sequence[str],
    drive: Drive,
    *,
    total: int,
    bound: Callable[[replay.Replay], tuple[int, int]],
    progress: Callable[[str, int, int], None],
) -> list[scoring.Summary]:
    """Drive the same load through every policy in front of the same pools; the summaries."""
    summaries = []
    with _pools(config, endpoints) as pools, tempfile.TemporaryDirectory() as tmp:
        for policy in available_policies(config.policies):
            for url in (u for urls in pools.values() for u in urls):
                _flush(url)
            before = {u: _requests_served(u) for urls in pools.values() for u in urls}
            done = 0

            def tick(n: int, policy: str = policy) -> None:
                nonlocal done
                done += n
                progress(policy, done, total)

            with _target(
                policy,
                pools,
                pathlib.Path(tmp),
                routing={
                    "prefixChars": config.prefix_chars,
                    "loadFactor": config.load_factor,
                    "moveMargin": config.move_margin,
                },
            ) as target:
                result = asyncio.run(drive(target, tick))
                breaks = None
                if policy in KVPIN_POLICIES and isinstance(target, targets.Routed):
                    routers = {u for urls in target.urls.values() for u in urls}
                    breaks = sum(_scrape_sum(u, _BREAKS) for u in routers)
            per_pod = {u: _requests_served(u) - before[u] for u in before}
            summaries.append(scoring.summarize(
                policy, result.records, bound=bound(result), makespan_s=result.makespan_s,
                per_pod=per_pod, prefix_breaks=breaks,
            ))  # fmt: skip
            time.sleep(0.2)
    return summaries


def run(
    config: BenchConfig, *, progress: Callable[[str, int, int], None] = lambda p, d, t: None
) -> list[scoring.Summary]:
    """Run every policy on the closed-loop agent workload; their summaries in order."""
    workload = workloads.generate(config.workload)

    def drive(target: targets.Target, tick: Callable[[int], None]) -> Awaitable[replay.Replay]:
        return replay.replay(workload, target, concurrency=config.concurrency, progress=tick)

    return _each_policy(
        config, workload.endpoints, drive,
        total=len(workload.conversations) * config.workload.turns,
        bound=lambda result: scoring.infinite_cache_hits(result.bodies), progress=progress,
    )  # fmt: skip


def run_trace(
    config: BenchConfig,
    requests: list[traces.TraceRequest],
    *,
    speed: float,
    progress: Callable[[str, int, int], None] = lambda p, d, t: None,
) -> list[scoring.Summary]:
    """Replay a trace open loop through every policy (one endpoint); their summaries."""
    endpoint = "ep-trace"
    bounds: list[tuple[int, int]] = []  # the same requests every time: computed once

    def drive(target: targets.Target, tick: Callable[[int], None]) -> Awaitable[replay.Replay]:
        return replay.replay_trace(requests, endpoint, target, speed=speed, progress=tick)

    def bound(result: replay.Replay) -> tuple[int, int]:
        if not bounds:
            bounds.append(scoring.infinite_cache_hits(result.bodies))
        return bounds[0]

    return _each_policy(
        config, [endpoint], drive, total=len(requests), bound=bound, progress=progress
    )
