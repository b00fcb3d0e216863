"""Members' own load and cache size, read from their Prometheus endpoints.

Each router replica sees only the requests it sent; the engines see them all. Every
`interval` seconds the router reads each member's `/metrics` (with a short timeout) and keeps
the requests waiting and running there: vLLM's `vllm:num_requests_waiting` and
`vllm:num_requests_running` (which `kvpin sim` exposes too), SGLang's `sglang:num_queue_reqs`
and `sglang:num_running_reqs`; and the size of its KV cache in tokens (vLLM's
`vllm:cache_config_info` labels `num_gpu_blocks` x `block_size`, SGLang's
`sglang:max_total_num_tokens`), from which router.holdings guesses what it has evicted. A
member whose metrics cannot be read, or were read too long ago, has no engine load: the router
falls back to its own estimate, and no request ever waits for a scrape. `parse` is pure;
`EngineLoads` does the I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import re
import time
from collections.abc import Callable, Iterable

import aiohttp

from kvpin import logs

log = logging.getLogger(logs.PROXY)
_WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs")
_RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs")
_CAPACITY = "sglang:max_total_num_tokens"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? ([0-9.eE+-]+|NaN)", re.MULTILINE)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"')


@dataclasses.dataclass(frozen=True)
class EngineLoad:
    waiting: float
    running: float
    at: float  # monotonic time of the scrape
    mine: int = 0  # this replica's own requests on the member when the scrape came back
    capacity: float | None = None  # tokens its KV cache holds, where the engine says


def _number(text: str) -> float | None:
    """A finite non-negative number, else None (a NaN would poison every estimate)."""
    with contextlib.suppress(ValueError):
        number = float(text)
        if math.isfinite(number) and number >= 0:
            return number
    return None


def _cache_tokens(labels: str) -> float | None:
    """vLLM's `cache_config_info` labels -> the cache's size in tokens."""
    found = dict(_LABEL.findall(labels))
    blocks, size = _number(found.get("num_gpu_blocks", "")), _number(found.get("block_size", ""))
    return blocks * size if blocks and size else None


def parse(text: str, at: float) -> EngineLoad | None:
    """An engine's load from its metrics text (summed over label sets); None if absent."""
    totals: dict[str, float] = {}
    capacity = None
    for name, labels, value in _SAMPLE.findall(text):
        number = _number(value)
        if number is None:
            continue
        if name in _WAITING or name in _RUNNING:
            totals[name] = totals.get(name, 0.0) + number
        elif name == "vllm:cache_config_info":
            capacity = _cache_tokens(labels) or capacity
        elif name == _CAPACITY and number:
            capacity = number
    waiting = [totals[n] for n in _WAITING if n in totals]
    running = [totals[n] for n in _RUNNING if n in totals]
    if not waiting and not running:
        return None
    return EngineLoad(sum(waiting), sum(running), at, capacity=capacity)


class EngineLoads:
    """The last load read from each member URL."""

    def __init__(self, urls: Callable[[], Iterable[str]], mine: Callable[[str], int], *,
                 interval: float = 0.25, timeout: float = 0.2,
                 max_age: float = 2.0) -> None:  # fmt: skip
        """`mine(url)`: this replica's requests in flight there, stamped on each scrape so a
        stale scrape can be corrected by what this replica started and finished since."""
        self._urls, self._mine = urls, mine
        self.interval, self.timeout, self.max_age = interval, timeout, max_age
        self._loads: dict[str, EngineLoad] = {}
        self._task: asyncio.Task[None] | None = None

    def get(self, url: str, now: float) -> EngineLoad | None:
        """The member's load if it was read recently."""
        load = self._loads.get(url)
        return load if load is not None and now - load.at <= self.max_age else None

    def start(self, session: aiohttp.ClientSession) -> None:
        if self.interval > 0:
            self._task = asyncio.get_running_loop().create_task(self._follow(session))

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _read(self, session: aiohttp.ClientSession, url: str) -> None:
        try:
            async with asyncio.timeout(self.timeout), session.get(f"{url}/metrics") as r:
                text = await r.text() if r.status == 200 else ""
        except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError):
            return
        load = parse(text, time.monotonic())
        if load is not None:
            self._loads[url] = dataclasses.replace(load, mine=self._mine(url))

    async def _follow(self, session: aiohttp.ClientSession) -> None:
        while True:
            urls = set(self._urls())
            for gone in self._loads.keys() - urls:
                del self._loads[gone]
            await asyncio.gather(*(self._read(session, url) for url in urls))
            await asyncio.sleep(self.interval)
