"""`kvpin bench router`: the router's throughput on one core, its added latency, and the cost
of one routing decision, side by side with `sglang-router` when it is installed.

Layout on a 2-core machine: the router under test is pinned to CPU 0; the simulators
(`--time-scale 0`) and wrk share CPU 1. Every target gets the same simulators and the same
load in the same run, so the comparison is fair even where the simulators cap the figures.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import pathlib
import shutil
import sys
import tempfile
import timeit
import tracemalloc
from collections.abc import Iterator

import yaml

from kvpin import api
from kvpin.bench import bodies, processes, wrk
from kvpin.router import bodies as router_bodies
from kvpin.router import keys, ring
from kvpin.router.breaks import BreakDetector
from kvpin.router.holdings import CHUNK_CHARS, Holdings, chunk_names

SMALL_CHAT = bodies.small_chat("ep-a")


@dataclasses.dataclass(frozen=True)
class RouterBenchConfig:
    """Knobs of the router benchmark."""

    duration_s: float = 10.0
    connections: int = 32
    sims: int = 2
    router_cpu: int = 0
    load_cpu: int = 1


@dataclasses.dataclass(frozen=True)
class Row:
    target: str
    throughput: wrk.Result
    latency: wrk.Result


def decision_cost(prompt_bytes: int = 32 * 1024, members: int = 8) -> float:
    """Seconds for one routing decision on a chat body of `prompt_bytes`: JSON parse, zones,
    prefix key, conversation id, prefix-break check and the bounded-load ring walk."""
    words = ("lorem ipsum dolor sit amet consectetur adipiscing elit " * 1000)[: prompt_bytes // 2]
    messages = [{"role": "system", "content": words}, {"role": "user", "content": words}]
    body = json.dumps({"model": "ep-a", "messages": messages}).encode()
    pods = [api.RingMember(f"pod-{i}", f"10.0.0.{i}:8000") for i in range(members)]
    the_ring = ring.EndpointRing(pods)
    detector = BreakDetector()

    def decide() -> None:
        summary = router_bodies.summarize(body, router_bodies.Limits())
        conversation = keys.conversation_id(summary.opening, None)
        key = keys.routing_key("prefix", "ep-a", summary.head, None, prefix_chars=2048)
        detector.observe(conversation, summary.turn)
        ring.within_bound(list(the_ring.walk(key)), {}, load_factor=2.0, size=members)

    runs = 2000
    return min(timeit.repeat(decide, number=runs, repeat=3)) / runs


def conversation_bytes(conversations: int = 20_000) -> float:
    """Bytes the break detector holds per conversation (traced allocations, 40-turn histories),
    where its last turn went included."""

    def body(c: int) -> bytes:
        messages = [{"role": "user", "content": f"conversation {c} turn {t}"} for t in range(40)]
        return json.dumps({"model": "ep-a", "messages": messages}).encode()

    turns = [router_bodies.summarize(body(c), router_bodies.Limits()) for c in range(50)]
    detector = BreakDetector(capacity=conversations)
    member = api.RingMember("pod-0", "10.0.0.1:8000")  # the ring's own object: shared
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for c in range(conversations):
        conversation = keys.digest("c", str(c))
        detector.observe(conversation, turns[c % len(turns)].turn)
        detector.sent(conversation, member)  # where it went, as the proxy records
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return held / conversations


def holdings_bytes(prompts: int = 2_000) -> float:
    """Bytes the placement index holds per entry (a chunk of prompt, about 500 tokens, and a
    member holding it, or the ghost of one it trimmed), traced over prompts of 10 chunks sent
    to 8 members, half of them with room for one prompt, so that both kinds are counted."""
    table = Holdings(max_bytes=2**40)
    for member in range(0, 8, 2):
        table.resize(f"pod-{member}", 10)
    chunk = "w" * CHUNK_CHARS
    names = [
        chunk_names(keys.Zones("", "", (("user", f"{c} {chunk * 10}"),))) for c in range(prompts)
    ]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i, prompt in enumerate(names):
        table.record(b"", prompt, f"pod-{i % 8}")
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return held / (len(table) + table.ghosts)


def parse_ms_per_mib() -> dict[str, float]:
    """Milliseconds per MiB to summarize a body: long strings, and many tiny messages."""
    long_text = {"model": "ep-a", "messages": [
        {"role": "user", "content": "lorem ipsum dolor sit amet " * 4000} for _ in range(40)
    ]}  # fmt: skip
    tiny = {"model": "ep-a", "messages": [{"role": "user", "content": "x"}] * 9000}
    out = {}
    for name, body in (("long strings", long_text), ("tiny messages", tiny)):
        raw = json.dumps(body).encode()
        limits = router_bodies.Limits(max_messages=10**6)
        seconds = min(timeit.repeat(lambda raw=raw, limits=limits: router_bodies.summarize(
            raw, limits), number=3, repeat=3)) / 3  # fmt: skip
        out[name] = seconds * 1e3 / (len(raw) / 2**20)
    return out


def _targets(urls: list[str], tmp: pathlib.Path) -> Iterator[tuple[str, list[str]]]:
    """Each router to measure and its command line, each on a fresh port."""
    config = tmp / "router.yaml"
    config.write_text(yaml.safe_dump({"endpoints": {"ep-a": {"members": urls}}}))
    yield "kvpin router", [
        *processes.kvpin_command(), "router", "--config", str(config),
        "--host", "127.0.0.1", "--port", str(processes.free_port()), "--log-level", "WARNING",
    ]  # fmt: skip
    peers = {
        # name: (subcommand, log level, policies)
        "sglang-router": (["launch"], "warn", ("cache_aware", "round_robin")),
        "vllm-router": ([], "warning", ("cache_aware", "consistent_hash")),
    }
    for name, (subcommand, level, policies) in peers.items():
        peer = find_peer(name)
        if peer is None:
            continue
        for policy in policies:
            yield f"{name} ({policy})", [
                peer, *subcommand, "--host", "127.0.0.1", "--port", str(processes.free_port()),
                "--policy", policy, "--prometheus-port", str(processes.free_port()),
                "--log-level", level, "--worker-urls", *urls,
            ]  # fmt: skip


def find_peer(name: str) -> str | None:
    """A peer router's executable: on PATH or beside this Python."""
    beside = pathlib.Path(sys.executable).parent / name
    return shutil.which(name) or (str(beside) if beside.exists() else None)


def run(config: RouterBenchConfig) -> str:
    """Run the benchmark; the markdown report."""
    if not wrk.available():
        raise SystemExit("kvpin bench router needs wrk: apt-get install wrk")
    rows: list[Row] = []
    with contextlib.ExitStack() as stack:
        urls = []
        for _ in range(config.sims):
            port = processes.free_port()
            url = f"http://127.0.0.1:{port}"
            stack.enter_context(processes.running(
                [*processes.kvpin_command(), "sim", "--port", str(port), "--time-scale", "0",
                 "--served-model-name", "ep-a", "--log-level", "WARNING"],
                health_url=f"{url}/health", cpus=[config.load_cpu],
            ))  # fmt: skip
            urls.append(url)
        rows.append(_measure("direct to one sim", urls[0], config))
        tmp = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory()))
        for name, command in _targets(urls, tmp):
            base = f"http://127.0.0.1:{command[command.index('--port') + 1]}"
            path = "/healthz" if name == "kvpin router" else "/health"
            with processes.running(command, health_url=base + path, cpus=[config.router_cpu]):
                rows.append(_measure(name, base, config))
    figures = Figures(decision_cost(), conversation_bytes(), parse_ms_per_mib(), holdings_bytes())
    return format_report(rows, figures, config)


def _measure(name: str, base: str, config: RouterBenchConfig) -> Row:
    url = f"{base}/v1/chat/completions"
    cpus = [config.load_cpu]
    wrk.run(url, SMALL_CHAT, duration_s=1, connections=config.connections, cpus=cpus)
    throughput = wrk.run(url, SMALL_CHAT, duration_s=config.duration_s,
                         connections=config.connections, cpus=cpus)  # fmt: skip
    latency = wrk.run(url, SMALL_CHAT, duration_s=config.duration_s / 2, connections=1, cpus=cpus)
    return Row(name, throughput, latency)


@dataclasses.dataclass(frozen=True)
class Figures:
    """The request path's own costs, measured in-process."""

    decision_s: float
    per_conversation: float  # bytes of the break detector
    parse_ms: dict[str, float]  # per MiB, by body shape
    per_chunk: float  # bytes of the placement index


def format_report(rows: list[Row], figures: Figures, config: RouterBenchConfig) -> str:
    """The table, the decision cost and the command."""
    direct = rows[0].latency.latency_s.get(50, 0.0)
    lines = [
        f"| target | requests/s ({config.connections} conns) | p50 ms (1 conn) | p99 ms (1 conn) "
        "| added p50 ms | errors |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        p50 = row.latency.latency_s.get(50, 0.0)
        added = "—" if row is rows[0] else f"{(p50 - direct) * 1e3:.2f}"
        lines.append(
            f"| {row.target} | {row.throughput.requests_per_s:,.0f} | {p50 * 1e3:.2f} "
            f"| {row.latency.latency_s.get(99, 0.0) * 1e3:.2f} | {added} "
            f"| {row.throughput.errors + row.latency.errors} |"
        )
    lines += [
        "",
        f"Routing decision for a 32 KB chat body (parse, keys, break check, ring walk): "
        f"{figures.decision_s * 1e6:.0f} µs",
        f"Break detector memory: {figures.per_conversation:.0f} bytes per conversation, "
        "whatever its length",
        f"Placement index memory: {figures.per_chunk:.0f} bytes per chunk of "
        f"{CHUNK_CHARS:,} characters (about 500 tokens) of distinct prompt",
        "Summarizing a body: "
        + ", ".join(f"{name} {ms:.1f} ms/MiB" for name, ms in figures.parse_ms.items())
        + " (bodies over 2 MiB or 500 objects are parsed in a worker process)",
        "",
        f"`kvpin bench router --duration {config.duration_s:g} --connections "
        f"{config.connections}` (routers on CPU {config.router_cpu}; {config.sims} sims and wrk "
        f"on CPU {config.load_cpu}; Python {sys.version.split()[0]})",
    ]
    return "\n".join(lines)
