"""The simulated GPU: continuous batching with chunked prefill over one prefix cache.

I/O only through the event loop's clock. Requests wait in FIFO order until the scheduler admits
them (a free running slot and cache blocks for their prompt). Each step then spends a token
budget (`max_batch_tokens`): one token for every decoding sequence, the rest on prefill chunks
of the uncached prompt tokens, oldest first. A step lasts

    step_overhead + prefill_tokens / prefill_rate + (1 / decode_rate if anything decodes)

scaled by `time_scale`, so an overloaded pod queues, a cold prompt is slow, and a cached one is
fast. The step that finishes a prompt's prefill produces its first token (TTFT).

With `time_scale == 0` there is no simulated latency: requests are answered at once, with the
same cache accounting, which is what the simulator's own throughput benchmark measures.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import AsyncIterator, Sequence

from kvpin.sim import cache as caching


@dataclasses.dataclass(frozen=True)
class Timing:
    """The GPU's speed. Defaults are near an 8B model on one A100."""

    prefill_tokens_per_s: float = 10_000.0
    """Uncached prompt tokens computed per second."""
    decode_tokens_per_s: float = 50.0
    """Tokens per second of one decoding sequence (a step's duration when decoding)."""
    step_overhead_s: float = 0.002
    """Fixed cost of every scheduler step."""
    max_batch_tokens: int = 8192
    """Token budget of one step, shared by decode tokens and prefill chunks."""
    max_running: int = 64
    """Sequences admitted at once; more wait."""
    time_scale: float = 1.0
    """Multiplier on every simulated duration: 0.01 runs 100x faster, 0 has no latency."""


@dataclasses.dataclass(eq=False)
class _Sequence:
    hashes: list[int]
    prompt_len: int
    max_tokens: int
    cached: int = 0
    prefilled: int = 0
    emitted: int = 0
    admitted: asyncio.Future[int] | None = None
    tokens: asyncio.Queue[int | None] = dataclasses.field(default_factory=asyncio.Queue)
    holds_blocks: bool = False

    @property
    def prefill_left(self) -> int:
        return self.prompt_len - self.cached - self.prefilled


class Generation:
    """An admitted request: its cached token count, then its tokens as they are produced."""

    def __init__(self, engine: Engine, seq: _Sequence) -> None:
        self._engine = engine
        self._seq = seq

    @property
    def cached(self) -> int:
        """Prompt tokens found in the prefix cache."""
        return self._seq.cached

    async def batches(self) -> AsyncIterator[range]:
        """The indices of generated tokens, grouped as they become ready together."""
        seq = self._seq
        if self._engine.timing.time_scale == 0:
            yield range(seq.max_tokens)
            return
        done = 0
        while done < seq.max_tokens:
            if await seq.tokens.get() is None:
                return
            ready = 1
            while not seq.tokens.empty():
                if seq.tokens.get_nowait() is None:
                    break
                ready += 1
            yield range(done, done + ready)
            done += ready

    def close(self) -> None:
        """Abort if still running; free the request's blocks."""
        self._engine.abort(self._seq)


class Engine:
    """One simulated GPU serving requests from a shared prefix cache."""

    def __init__(self, prefix_cache: caching.PrefixCache, timing: Timing) -> None:
        self.cache = prefix_cache
        self.timing = timing
        self.waiting: collections.deque[_Sequence] = collections.deque()
        self.running: list[_Sequence] = []
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_prefilling(self) -> int:
        """Requests without their first token yet: waiting, or admitted and prefilling."""
        return len(self.waiting) + sum(1 for s in self.running if s.prefill_left)

    @property
    def queued_prefill_tokens(self) -> int:
        """Prefill tokens still to compute: what running sequences have left, and whole
        prompts of waiting ones (their cache hits are not known before admission)."""
        return sum(s.prefill_left for s in self.running) + sum(s.prompt_len for s in self.waiting)

    async def start(self, hashes: Sequence[int], prompt_len: int, max_tokens: int) -> Generation:
        """Queue a request and wait until the scheduler admits it (its cached tokens known).

        Cancelling the wait, or closing the Generation, aborts it and frees its blocks.
        """
        seq = _Sequence(list(hashes), prompt_len, max_tokens)
        if self.timing.time_scale == 0:
            seq.cached = self._instant(seq)
            seq.tokens.put_nowait(None)  # every token is ready at once
            return Generation(self, seq)
        seq.admitted = asyncio.get_running_loop().create_future()
        self.waiting.append(seq)
        self._ensure_loop()
        self._wake.set()
        try:
            await seq.admitted
        except BaseException:
            self.abort(seq)
            raise
        return Generation(self, seq)

    def _instant(self, seq: _Sequence) -> int:
        try:
            cached = self.cache.acquire(seq.hashes, seq.prompt_len)
        except caching.CacheFullError:  # nothing else runs without latency
            cached = 0
        else:
            self.cache.release(seq.hashes)
        return cached

    def _ensure_loop(self) -> None:
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        """Stop the scheduler; waiting and running requests end."""
        if self._loop_task:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
        for seq in [*self.waiting, *self.running]:
            self.abort(seq)
            seq.tokens.put_nowait(None)

    def abort(self, seq: _Sequence) -> None:
        """Drop a sequence wherever it is and release its blocks (idempotent)."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        if seq.holds_blocks:
            self.cache.release(seq.hashes)
            seq.holds_blocks = False
            self._wake.set()  # freed blocks may admit a waiting request

    def _admit(self) -> None:
        while self.waiting and len(self.running) < self.timing.max_running:
            seq = self.waiting[0]
            try:
                seq.cached = self.cache.acquire(seq.hashes, seq.prompt_len)
            except caching.CacheFullError:
                if self.running:
                    return  # wait for running requests to free blocks
                seq.cached = 0  # alone and still too big: serve it uncached
            else:
                seq.holds_blocks = True
            self.waiting.popleft()
            self.running.append(seq)
            if seq.admitted and not seq.admitted.done():
                seq.admitted.set_result(seq.cached)

    async def _run(self) -> None:
        t = self.timing
        while True:
            self._admit()
            if not self.running:
                self._wake.clear()
                await self._wake.wait()
                continue
            budget = t.max_batch_tokens
            decoding = [s for s in self.running if s.prefill_left == 0]
            budget -= len(decoding)
            chunks: list[tuple[_Sequence, int]] = []
            for seq in self.running:
                if seq.prefill_left and budget > 0:
                    chunk = min(seq.prefill_left, budget)
                    chunks.append((seq, chunk))
                    budget -= chunk
            prefill_tokens = sum(c for _, c in chunks)
            duration = t.step_overhead_s + prefill_tokens / t.prefill_tokens_per_s
            if decoding:
                duration += 1.0 / t.decode_tokens_per_s
            await asyncio.sleep(duration * t.time_scale)
            for seq, chunk in chunks:
                seq.prefilled += chunk
                if seq.prefill_left == 0:
                    self._emit(seq)  # the step that ends prefill samples the first token
            for seq in decoding:
                if seq in self.running:
                    self._emit(seq)

    def _emit(self, seq: _Sequence) -> None:
        if seq.emitted < seq.max_tokens:
            seq.tokens.put_nowait(seq.emitted)
            seq.emitted += 1
        if seq.emitted >= seq.max_tokens:
            seq.tokens.put_nowait(None)
            self.abort(seq)
