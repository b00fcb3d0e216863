"""The workload benchmark: a pool of simulators per endpoint, each policy in turn in front of
the same pools, the same conversations replayed through each, scored against the bound.

I/O: starts and stops every process itself (also on Ctrl-C: they are context-managed and get
SIGINT). Between policies the simulators' caches are flushed, so each policy starts cold.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import math
import pathlib
import re
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any

import aiohttp
import yaml

from kvpin.bench import (
    processes,
    replay,
    router_throughput,
    scenarios,
    scoring,
    targets,
    traces,
    workloads,
)
from kvpin.router import placement

KVPIN_POLICIES = ("kvpin", "kvpin-session", "kvpin-endpoint", "kvpin-x3", "kvpin-bare",
                  "kvpin-static")  # fmt: skip
# kvpin with the features that keep caches through pool changes turned off
BARE_ROUTING = {"keepHomes": False, "warmup": {"heads": 0}}
STATIC = "kvpin-static"  # in a lifecycle scenario: kvpin on the whole pool, which never changes
REPLICAS = {"kvpin-x3": 3}  # router replicas behind a round-robin client
PEER_POLICIES = (
    "sglang-router:cache_aware", "sglang-router:round_robin",
    "vllm-router:cache_aware", "vllm-router:consistent_hash",
)  # fmt: skip
DEFAULT_POLICIES = ("kvpin", "random", "round-robin", "least-inflight")
_SUCCESS = re.compile(r"^vllm:request_success_total\{[^}]*\} ([\d.e+]+)$", re.MULTILINE)
_BREAKS = re.compile(r"^kvpin_router_prefix_breaks_total\{[^}]*\} ([\d.e+]+)$", re.MULTILINE)
_LEFT_HOME = re.compile(r"^kvpin_router_(?:moves|spills)_total\{[^}]*\} ([\d.e+]+)$", re.MULTILINE)
_RING_CHANGES = re.compile(r"^kvpin_router_ring_changes_total\{[^}]*\} ([\d.e+]+)$", re.MULTILINE)


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
    move_margin: float = placement.DEFAULT_MOVE_MARGIN
    """The kvpin router's `routing.moveMargin`."""
    policies: tuple[str, ...] = DEFAULT_POLICIES
    scenario: str | None = None
    """A lifecycle scenario (bench.scenarios): the pool changes during each policy's run."""
    rounds: int = 1
    """Times every policy is run, round after round (policies interleaved, so that the machine's
    drift falls on all of them): one run of a policy moves by a point or more of hit rate."""


TURN_S = 0.3  # a turn's service time, to estimate the agentic workload's live working set


def live_working_set(workload: workloads.WorkloadConfig) -> workloads.WorkingSet:
    return workloads.working_set(workloads.generate(workload), turn_s=TURN_S)


def default_cache_blocks(workload: workloads.WorkloadConfig, pods: int) -> int:
    """Per-pod cache for a workload: for `agentic`, 1.5x each pod's share of the live working
    set when partitioned (so a replica of everything does not fit); else BenchConfig's."""
    if workload.variant != "agentic":
        return BenchConfig.cache_blocks
    share = live_working_set(workload).peak_tokens / pods
    return max(64, math.ceil(1.5 * share / 16))


def split_policy(policy: str) -> tuple[str, dict[str, Any]]:
    """`kvpin-x3@moveMargin=1@loadFactor=3` -> the policy and the router settings it overrides,
    so a setting is compared with the default side by side, in one run on the same pods.
    `@build=DIR` is not a setting: it runs the router of another checkout (its `.venv`), so a
    change is compared with the code before it in one run; nor is `@relay=true`: the replicas
    of `kvpin-x3` relay each endpoint to the one that owns it (router.replicas)."""
    base, *items = policy.split("@")
    overrides: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or base not in KVPIN_POLICIES:
            raise ValueError(f"policy {policy!r}: settings go after a kvpin policy, as @name=value")
        overrides[key] = yaml.safe_load(value)
    return base, overrides


def available_policies(policies: Sequence[str]) -> list[str]:
    """The requested policies whose software is installed (peers are optional)."""
    out = []
    for policy in policies:
        _, overrides = split_policy(policy)  # a malformed setting fails before anything starts
        if "build" in overrides:
            processes.kvpin_command(str(overrides["build"]))  # so does a missing build
        name = policy.split(":")[0]
        if policy in PEER_POLICIES and router_throughput.find_peer(name) is None:
            continue
        out.append(policy)
    return out


def _scrape_sum(url: str, pattern: re.Pattern[str]) -> int:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
        return int(sum(float(v) for v in pattern.findall(r.read().decode())))


def _ring_changes(routers: Sequence[str]) -> list[int]:
    return [_scrape_sum(r, _RING_CHANGES) for r in routers]


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
            for _ in range(config.pods + (1 if config.scenario else 0)):  # a restart's spare
                port = processes.free_port()
                url = f"http://127.0.0.1:{port}"
                command = [
                    *processes.kvpin_command(), "sim", "--port", str(port),
                    "--served-model-name", endpoint, "--kv-cache-blocks", str(config.cache_blocks),
                    "--prefill-tps", str(config.prefill_tps),
                    "--decode-tps", str(config.decode_tps),
                    "--time-scale", str(config.time_scale), "--log-level", "WARNING",
                    "--max-model-len", str(config.max_model_len), "--debug-routes",
                    "--pod-name", f"{endpoint}-{len(pools.get(endpoint, ()))}",
                ]  # fmt: skip
                stack.enter_context(processes.running(command, health_url=f"{url}/health"))
                pools.setdefault(endpoint, []).append(url)
        yield pools


def _members(urls: Sequence[str], config: BenchConfig, policy: str) -> dict[str, str]:
    """An endpoint's pool at the start of a policy's run: pod name -> URL."""
    if config.scenario and policy != STATIC:
        return scenarios.members_after(urls, 0)
    return {f"pod-{i}": url for i, url in enumerate(urls[: config.pods])}


@contextlib.contextmanager
def _target(
    policy: str,
    pools: dict[str, dict[str, str]],
    tmp: pathlib.Path,
    *,
    routing: dict[str, Any],
    command: Sequence[str],
    relay: bool = False,
) -> Iterator[targets.Target]:
    """The target of `policy` in front of `pools` (endpoint -> pod name -> URL); `command`
    starts a kvpin router (its replicas relaying to each other with `relay`)."""
    urls = {ep: list(members.values()) for ep, members in pools.items()}
    if policy in targets.BASELINES:
        yield targets.Baseline(policy, urls)
        return
    if policy == "oracle":
        yield targets.Oracle(urls, costs=placement.CostSettings(),
                             prefix_chars=int(routing["prefixChars"]))  # fmt: skip
        return
    if policy in KVPIN_POLICIES:
        with _kvpin(
            policy, pools, tmp / f"{policy}.yaml", routing=routing, command=command, relay=relay
        ) as target:
            yield target
        return
    with _peer(policy, pools) as target:
        yield target


@contextlib.contextmanager
def _kvpin(
    policy: str,
    pools: dict[str, dict[str, str]],
    config: pathlib.Path,
    *,
    routing: dict[str, Any],
    command: Sequence[str],
    relay: bool = False,
) -> Iterator[targets.Target]:
    """kvpin router replicas on a static file, which `reconfigure` rewrites; with `relay`,
    each told of the others (router.replicas)."""
    key = policy.partition("-")[2] if policy in ("kvpin-session", "kvpin-endpoint") else ""
    routing = {
        **routing,
        "key": key or "prefix",
        **(BARE_ROUTING if policy == "kvpin-bare" else {}),
    }

    def write(pools: dict[str, dict[str, str]]) -> None:
        doc = {"endpoints": {ep: {"routing": routing, "members": [
            {"name": name, "url": url} for name, url in members.items()]}
            for ep, members in pools.items()}}  # fmt: skip
        config.with_suffix(".new").write_text(yaml.safe_dump(doc))
        config.with_suffix(".new").replace(config)  # atomic: the router never reads half

    write(pools)
    with contextlib.ExitStack() as stack:
        routers = [f"http://127.0.0.1:{processes.free_port()}"
                   for _ in range(REPLICAS.get(policy, 1))]  # fmt: skip
        for router in routers:
            peers = ["--replica", router, "--replicas", ",".join(routers)] if relay else []
            stack.enter_context(processes.running(
                [*command, "router", "--config", str(config), "--host", "127.0.0.1",
                 "--port", router.rsplit(":", 1)[1], "--log-level", "WARNING", *peers],
                health_url=f"{router}/readyz",
            ))  # fmt: skip

        async def reconfigure(endpoint: str, members: Mapping[str, str]) -> None:
            changes = await asyncio.to_thread(_ring_changes, routers)
            pools[endpoint] = dict(members)
            write(pools)
            while True:  # every router polls the file every second
                now = await asyncio.to_thread(_ring_changes, routers)
                if all(a != b for a, b in zip(now, changes, strict=True)):
                    return
                await asyncio.sleep(0.05)

        yield targets.Routed(dict.fromkeys(pools, routers), reconfigure=reconfigure)


@contextlib.contextmanager
def _peer(policy: str, pools: dict[str, dict[str, str]]) -> Iterator[targets.Target]:
    """A peer router per endpoint; sglang-router's pool changes through its worker API."""
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
                       "--worker-urls", *members.values()]  # fmt: skip
            stack.enter_context(
                processes.running(command, health_url=f"http://127.0.0.1:{port}/health")
            )
            urls[endpoint] = f"http://127.0.0.1:{port}"

        async def reconfigure(endpoint: str, members: Mapping[str, str]) -> None:
            await _peer_workers(name, urls[endpoint], set(members.values()))

        yield targets.Routed(urls, reconfigure=reconfigure)


async def _peer_workers(name: str, router: str, wanted: set[str]) -> None:
    """Make a peer router's workers `wanted`: POST /workers to add (both peers), then
    DELETE /workers/{id} (sglang-router) or POST /remove_worker?url= (vllm-router)."""
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{router}/workers") as r:
            workers = {w["url"]: w.get("id") for w in (await r.json())["workers"]}
        for url in wanted - workers.keys():
            async with session.post(f"{router}/workers", json={"url": url}) as r:
                r.raise_for_status()
        for url in workers.keys() - wanted:
            if name == "sglang-router":
                remove = session.delete(f"{router}/workers/{workers[url]}")
            else:
                remove = session.post(f"{router}/remove_worker", params={"url": url})
            async with remove as r:
                r.raise_for_status()
        while True:  # sglang-router queues the changes: wait until they are done
            async with session.get(f"{router}/workers") as r:
                if {w["url"] for w in (await r.json())["workers"]} == wanted:
                    return
            await asyncio.sleep(0.05)


Drive = Callable[[str, targets.Target, Callable[[int], None]], Awaitable[replay.Replay]]
Sink = Callable[[str, Sequence[scoring.Placement]], None]
"""Takes each policy's requests as its run ends (`kvpin bench ... --records`)."""


def _ignore(policy: str, placed: Sequence[scoring.Placement]) -> None:
    """The default Sink."""


def _each_policy(
    config: BenchConfig,
    endpoints: Sequence[str],
    drive: Drive,
    *,
    total: int,
    bound: Callable[[replay.Replay], tuple[int, int]],
    progress: Callable[[str, int, int], None],
    sink: Sink = _ignore,
) -> list[tuple[scoring.Summary, replay.Replay]]:
    """Drive the same load through every policy in front of the same pools, `config.rounds`
    times; the summaries and the replays, round after round. Each run's requests go to
    `sink` too."""
    out = []
    policies = available_policies(config.policies)
    with _pools(config, endpoints) as pools, tempfile.TemporaryDirectory() as tmp:
        for policy in itertools.chain.from_iterable(itertools.repeat(policies, config.rounds)):
            for url in (u for urls in pools.values() for u in urls):
                _flush(url)
            before = {u: _requests_served(u) for urls in pools.values() for u in urls}
            done = 0

            def tick(n: int, policy: str = policy) -> None:
                nonlocal done
                done += n
                progress(policy, done, total)

            base, overrides = split_policy(policy)
            build = overrides.pop("build", None)
            relay = bool(overrides.pop("relay", False))
            members = {ep: _members(urls, config, base) for ep, urls in pools.items()}
            routing = {"prefixChars": config.prefix_chars, "loadFactor": config.load_factor,
                       "moveMargin": config.move_margin, **overrides}  # fmt: skip
            driven = _with_scenario(drive, pools, total) if config.scenario else drive
            with _target(
                base,
                members,
                pathlib.Path(tmp),
                routing=routing,
                command=processes.kvpin_command(build),
                relay=relay,
            ) as target:
                result = asyncio.run(driven(base, target, tick))
                breaks = left = None
                if base in KVPIN_POLICIES and isinstance(target, targets.Routed):
                    routers = {u for urls in target.urls.values() for u in urls}
                    breaks = sum(_scrape_sum(u, _BREAKS) for u in routers)
                    left = sum(_scrape_sum(u, _LEFT_HOME) for u in routers)
            per_pod = {u: _requests_served(u) - before[u] for u in before}
            placed = scoring.placements(result.records, result.bodies)
            sink(policy, placed)
            out.append((scoring.summarize(
                policy, result.records, bound=bound(result), makespan_s=result.makespan_s,
                per_pod=per_pod, prefix_breaks=breaks, left_home=left,
                placed=scoring.affinity(placed),
            ), result))  # fmt: skip
            time.sleep(0.2)
    return out


def _with_scenario(drive: Drive, pools: Mapping[str, Sequence[str]], total: int) -> Drive:
    """`drive`, with the pool changed at the scenario's points (except for kvpin-static);
    the times of the changes go to the replay's `changes`."""

    async def changed(
        policy: str, target: targets.Target, tick: Callable[[int], None]
    ) -> replay.Replay:
        if policy == STATIC:
            return await drive(policy, target, tick)
        answered = scenarios.Answered()

        def both(n: int) -> None:
            tick(n)
            answered.tick(n)

        times: list[float] = []
        follow = asyncio.create_task(
            scenarios.follow(target, pools, answered=answered, total=total, times=times)
        )
        try:
            result = await drive(policy, target, both)
        finally:
            follow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follow
        result.changes = times
        return result

    return changed


def run(
    config: BenchConfig,
    *,
    progress: Callable[[str, int, int], None] = lambda p, d, t: None,
    sink: Sink = _ignore,
) -> list[scoring.Summary]:
    """Run every policy on the closed-loop agent workload; their summaries in order."""
    return [summary for summary, _ in _run_workload(config, progress, sink)]


def run_scenario(
    config: BenchConfig,
    *,
    progress: Callable[[str, int, int], None] = lambda p, d, t: None,
    sink: Sink = _ignore,
) -> list[tuple[scoring.Summary, list[scenarios.PhaseFigures]]]:
    """The workload with the pool changing (`config.scenario`); figures per phase too."""
    return [
        (summary, [scenarios.figures(p) for p in scenarios.phases(result.records, result.changes)])
        for summary, result in _run_workload(config, progress, sink)
    ]


def _run_workload(
    config: BenchConfig, progress: Callable[[str, int, int], None], sink: Sink
) -> list[tuple[scoring.Summary, replay.Replay]]:
    workload = workloads.generate(config.workload)

    def drive(
        _: str, target: targets.Target, tick: Callable[[int], None]
    ) -> Awaitable[replay.Replay]:
        if config.workload.variant == "agentic":
            return replay.replay_sessions(workload, target, progress=tick)
        return replay.replay(workload, target, concurrency=config.concurrency, progress=tick)

    return _each_policy(
        config, workload.endpoints, drive,
        total=sum(len(c.user_turns) for c in workload.conversations),
        bound=lambda result: scoring.infinite_cache_hits(result.bodies), progress=progress,
        sink=sink,
    )  # fmt: skip


def run_trace(
    config: BenchConfig,
    requests: list[traces.TraceRequest],
    *,
    speed: float,
    progress: Callable[[str, int, int], None] = lambda p, d, t: None,
    sink: Sink = _ignore,
) -> list[scoring.Summary]:
    """Replay a trace open loop through every policy (one endpoint); their summaries."""
    endpoint = "ep-trace"
    bounds: list[tuple[int, int]] = []  # the same requests every time: computed once

    def drive(
        _: str, target: targets.Target, tick: Callable[[int], None]
    ) -> Awaitable[replay.Replay]:
        return replay.replay_trace(requests, endpoint, target, speed=speed, progress=tick)

    def bound(result: replay.Replay) -> tuple[int, int]:
        if not bounds:
            bounds.append(scoring.infinite_cache_hits(result.bodies))
        return bounds[0]

    return [summary for summary, _ in _each_policy(
        config, [endpoint], drive, total=len(requests), bound=bound, progress=progress, sink=sink
    )]  # fmt: skip
