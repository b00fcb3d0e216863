"""`kvpin bench sim`: how many small requests per second one `kvpin sim` serves on one core.

The simulator runs with no simulated latency (`--time-scale 0`), pinned to CPU 0; wrk loads it
from CPU 1. This is the ceiling a router benchmark may ask of one simulator before the
simulator, not the router, is what is measured.
"""

from __future__ import annotations

import dataclasses
import sys

from kvpin.bench import bodies, processes, wrk

SMALL_CHAT = bodies.small_chat("sim-8b")


@dataclasses.dataclass(frozen=True)
class SimBenchConfig:
    """Knobs of the simulator throughput benchmark."""

    duration_s: float = 10.0
    connections: int = 32
    server_cpu: int = 0
    client_cpu: int = 1


def run(config: SimBenchConfig) -> str:
    """Run the benchmark; the markdown table."""
    if not wrk.available():
        raise SystemExit("kvpin bench sim needs wrk: apt-get install wrk")
    port = processes.free_port()
    url = f"http://127.0.0.1:{port}"
    rows = []
    with processes.running(
        [*processes.kvpin_command(), "sim", "--port", str(port), "--time-scale", "0",
         "--log-level", "WARNING"],
        health_url=f"{url}/health", cpus=[config.server_cpu],
    ):  # fmt: skip
        for stream in (False, True):
            body = {**SMALL_CHAT, "stream": stream}
            wrk.run(
                f"{url}/v1/chat/completions",
                body,
                duration_s=1,
                connections=config.connections,
                cpus=[config.client_cpu],
            )  # warm-up; fmt: skip
            result = wrk.run(
                f"{url}/v1/chat/completions", body, duration_s=config.duration_s,
                connections=config.connections, cpus=[config.client_cpu],
            )  # fmt: skip
            rows.append((stream, result))
    return format_table(rows, config)


def format_table(rows: list[tuple[bool, wrk.Result]], config: SimBenchConfig) -> str:
    """The results as markdown, with the command that made them."""
    lines = [
        "| request | requests/s (1 core) | p50 ms | p99 ms | errors |",
        "|---|---:|---:|---:|---:|",
    ]
    for stream, r in rows:
        kind = "chat, 4 tokens, streamed" if stream else "chat, 4 tokens"
        lines.append(
            f"| {kind} | {r.requests_per_s:,.0f} | {r.latency_s.get(50, 0) * 1e3:.2f} "
            f"| {r.latency_s.get(99, 0) * 1e3:.2f} | {r.errors} |"
        )
    lines.append("")
    lines.append(
        f"`kvpin bench sim --duration {config.duration_s:g} --connections {config.connections}`"
        f" (sim on CPU {config.server_cpu}, wrk on CPU {config.client_cpu}, "
        f"Python {sys.version.split()[0]})"
    )
    return "\n".join(lines)
