"""Warming a member that joins before it takes new keys.

A pod that joins the ring (scale-up) or rejoins at a new address (a restart, a rollout step)
starts with an empty KV cache, and its first requests would pay the whole prefill of prompts
that are hot everywhere else. So the router sends it, with `max_tokens: 1`, the shared heads
its requests will most likely start with: the configured warm-up prompts (`routing.warmup.
prompts`) and the heads this replica has seen most recently (leading system messages and
tools, `HotHeads`), and keeps it out of placement until that is done or `timeoutSeconds` have
passed; a member that cannot be warmed joins anyway. Warm-up requests go straight to the
member: they are counted in `kvpin_router_warmup_requests_total`, never as user traffic.

Every top head goes to every new member, not only heads whose keys it will own: placement by
cost spreads a head that is hot enough to be among the top ones over every member anyway.
Several router replicas warm the same member each: the second pass costs the engine little
(it finds the heads cached). Heads live only in memory: a restarted router warms with the
configured prompts alone until it has seen traffic.

`HotHeads` and `warmup_body` are pure; `Warmer` does the I/O.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import aiohttp
import orjson

from kvpin import api, logs
from kvpin.router import holdings, keys
from kvpin.router.metrics import RouterMetrics

log = logging.getLogger(logs.PROXY)

MAX_HEAD_BYTES = 256 * 2**10  # a larger head is not kept (it would crowd out the others)
RETRY_S = 0.25  # between attempts at a member that does not listen yet


@dataclasses.dataclass(frozen=True)
class WarmupConfig:
    """routing.warmup: how a joining member is warmed."""

    heads: int = 8
    """The most used heads this replica has seen that are sent to it (0: none)."""
    timeout_s: float = 30.0
    """A member still warming after this long joins anyway."""
    concurrency: int = 2
    """Warm-up requests in flight to one member at a time."""
    prompts: tuple[bytes, ...] = ()
    """Configured heads (JSON objects with `messages` and optionally `tools`), always sent."""


def head_of(body: Mapping[str, Any]) -> bytes:
    """A chat body's shared head, serialized: its leading system messages and its tools;
    b"" when it has neither (then there is nothing worth warming)."""
    messages = body.get("messages")
    lead = []
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, Mapping) or message.get("role") not in ("system", "developer"):
            break
        lead.append(message)
    tools = body.get("tools")
    if not lead and not tools:
        return b""
    return orjson.dumps({"messages": lead, "tools": tools} if tools else {"messages": lead})


@dataclasses.dataclass(frozen=True)
class Warming:
    """One warm-up request, and what the member holds once it is answered."""

    body: bytes
    scope: bytes  # the cache salt, as router.holdings scopes chunks
    chunks: bytes  # the head's chunk names (router.holdings)


def warming(model: str, head: bytes, salt: str) -> Warming:
    """The warm-up request for `head` under `salt`."""
    chunks = holdings.chunk_names(keys.parse_zones(orjson.loads(head)))
    return Warming(warmup_body(model, head, salt), salt.encode("utf-8", "surrogatepass"), chunks)


def warmup_body(model: str, head: bytes, salt: str) -> bytes:
    """The request that makes a member compute `head`: the head and a one-word user turn (some
    chat templates refuse a conversation without one), one output token."""
    doc = orjson.loads(head)
    doc["messages"] = [*doc.get("messages", ()), {"role": "user", "content": "Hi"}]
    doc.update(model=model, max_tokens=1, stream=False)
    if salt:
        doc["cache_salt"] = salt
    return orjson.dumps(doc)


class HotHeads:
    """The heads an endpoint's requests used most recently, with their use counts.

    Bounded: `capacity` heads of at most MAX_HEAD_BYTES each, the least recently used dropped
    first; an update is one dictionary access and a hash of the head.
    """

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self._heads: collections.OrderedDict[bytes, tuple[int, str, bytes]] = (
            collections.OrderedDict()
        )

    def seen(self, head: bytes, salt: str) -> None:
        if not head or len(head) > MAX_HEAD_BYTES:
            return
        key = hashlib.blake2b(salt.encode("utf-8", "surrogatepass") + b"\0" + head,
                              digest_size=16).digest()  # fmt: skip
        uses = self._heads.pop(key, (0, salt, head))[0]
        self._heads[key] = (uses + 1, salt, head)
        if len(self._heads) > self.capacity:
            self._heads.popitem(last=False)

    def top(self, k: int) -> list[tuple[bytes, str]]:
        """The `k` most used heads (more recent first among equals), with their cache salts."""
        entries = list(self._heads.values())  # least recent first
        order = sorted(range(len(entries)), key=lambda i: (-entries[i][0], -i))
        return [(entries[i][2], entries[i][1]) for i in order[:k]]


class Warmer:
    """Warms joining members in the background and says which are still warming."""

    def __init__(
        self,
        metrics: RouterMetrics,
        warmed: Callable[[str, str, Warming], None],
        path: str = "/v1/chat/completions",
    ) -> None:
        """`warmed(endpoint, member, warming)` is called for each answered warm-up request."""
        self.metrics, self.warmed, self.path = metrics, warmed, path
        self.session: aiohttp.ClientSession | None = None
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._queued: list[tuple[str, str, str, list[Warming], WarmupConfig]] = []

    def warming(self, ep: str) -> set[str]:
        return {m for (e, m) in self._tasks if e == ep}

    def start(self, session: aiohttp.ClientSession) -> None:
        """Begin warming; members that joined before the router started are warmed now."""
        self.session = session
        queued, self._queued = self._queued, []
        for args in queued:
            self.warm(*args)

    async def stop(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def warm(self, ep: str, member: str, url: str, items: list[Warming],
             config: WarmupConfig) -> None:  # fmt: skip
        """Send `items` to `member` at `url`, keeping it out of placement meanwhile."""
        self.cancel(ep, member)
        if not items:
            return
        if self.session is None:
            self._queued.append((ep, member, url, items, config))
            return
        task = asyncio.get_running_loop().create_task(self._warm(ep, member, url, items, config))
        self._tasks[ep, member] = task

        def done(_: asyncio.Task[None]) -> None:
            if self._tasks.get((ep, member)) is task:
                del self._tasks[ep, member]

        task.add_done_callback(done)

    def cancel(self, ep: str, member: str) -> None:
        """`member` left (or rejoined): stop warming it."""
        task = self._tasks.pop((ep, member), None)
        if task is not None:
            task.cancel()

    async def _warm(
        self, ep: str, member: str, url: str, items: list[Warming], config: WarmupConfig
    ) -> None:
        started = time.monotonic()
        gate = asyncio.Semaphore(config.concurrency)
        outcome = "warm"
        try:
            async with asyncio.timeout(config.timeout_s):
                await asyncio.gather(*(self._send(ep, member, url, i, gate) for i in items))
        except TimeoutError:
            outcome = "timeout"
        log.info("%s: %s warmed with %d heads in %.2fs (%s)", ep, member, len(items),
                 time.monotonic() - started, outcome)  # fmt: skip
        self.metrics.of(self.metrics.warmups, ep, outcome).inc()

    async def _send(
        self, ep: str, member: str, url: str, item: Warming, gate: asyncio.Semaphore
    ) -> None:
        """One warm-up request, retried while the member does not listen yet."""
        assert self.session is not None
        headers = {"Content-Type": "application/json", api.WARMUP_HEADER: "1"}
        async with gate:
            while True:
                try:
                    async with self.session.post(url + self.path, data=item.body,
                                                 headers=headers) as r:  # fmt: skip
                        await r.read()
                        outcome = "ok" if r.status < 300 else "error"
                        break
                except aiohttp.ClientConnectorError:
                    await asyncio.sleep(RETRY_S)
                except aiohttp.ClientError:
                    outcome = "error"
                    break
        self.metrics.of(self.metrics.warmup_requests, ep, outcome).inc()
        if outcome == "ok":
            self.warmed(ep, member, item)


def joined(
    old: Iterable[tuple[str, str]], new: Iterable[tuple[str, str]]
) -> tuple[set[str], set[str]]:
    """From (name, address) pairs before and after: members that joined or came back at a new
    address (cold either way), and members that left or restarted (their cache is gone)."""
    before, after = dict(old), dict(new)
    fresh = {n for n, a in after.items() if before.get(n) != a}
    return fresh, {n for n, a in before.items() if after.get(n) != a}
