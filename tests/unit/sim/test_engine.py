"""The scheduler on the event loop's clock: prefill cost, contention, cancellation."""

import asyncio
import time

from kvpin.sim import cache
from kvpin.sim.engine import Engine, Timing

BS = 16
# 1,000 prefill tokens per second at time scale 0.1: 2,000 uncached tokens take 0.2 s.
TIMING = Timing(prefill_tokens_per_s=1_000, decode_tokens_per_s=100, step_overhead_s=0.001,
                max_batch_tokens=512, max_running=8, time_scale=0.1)  # fmt: skip


def hashes(n_blocks: int, start: int = 0) -> list[int]:
    tokens = [start + i for i in range(n_blocks * BS)] + [7]
    return cache.block_hashes(tokens, block_size=BS)


async def ttft(
    engine: Engine, h: list[int], prompt_len: int, max_tokens: int = 2
) -> tuple[int, float]:
    started = time.monotonic()
    generation = await engine.start(h, prompt_len, max_tokens)
    first = None
    async for _ in generation.batches():
        first = first or time.monotonic() - started
    generation.close()
    assert first is not None
    return generation.cached, first


async def test_cached_prefixes_reach_the_first_token_sooner() -> None:
    engine = Engine(cache.PrefixCache(1000, block_size=BS), TIMING)
    prompt = hashes(125)  # 2,000 tokens
    cold_cached, cold = await ttft(engine, prompt, 2001)
    warm_cached, warm = await ttft(engine, prompt, 2001)
    await engine.close()
    assert (cold_cached, warm_cached) == (0, 2000)
    assert cold > 0.15  # 2,000 tokens at 10,000/s of wall time
    assert warm < cold / 3


async def test_prefills_contend_for_the_gpu() -> None:
    engine = Engine(cache.PrefixCache(1000, block_size=BS), TIMING)
    alone = (await ttft(engine, hashes(30, start=10_000), 481))[1]
    results = await asyncio.gather(
        *(ttft(engine, hashes(30, start=20_000 * (i + 2)), 481) for i in range(4))
    )
    await engine.close()
    slowest = max(first for _, first in results)
    assert slowest > 3 * alone  # four cold prompts share one prefill budget


async def test_requests_wait_beyond_max_running() -> None:
    engine = Engine(cache.PrefixCache(1000, block_size=BS), Timing(max_running=1, time_scale=0.01))
    first = await engine.start(hashes(1, 1), 17, 50)
    second = asyncio.ensure_future(engine.start(hashes(1, 2), 17, 1))
    await asyncio.sleep(0.01)
    assert (engine.num_running, engine.num_waiting) == (1, 1)
    first.close()  # a client going away frees the slot and its blocks
    admitted = await second
    assert admitted.cached == 0
    assert engine.num_running == 1
    assert [list(b) async for b in admitted.batches()] == [[0]]
    assert (engine.num_running, engine.num_waiting) == (0, 0)
    assert engine.cache.usage == 0
    await engine.close()


async def test_a_cancelled_wait_leaves_nothing_behind() -> None:
    engine = Engine(cache.PrefixCache(1000, block_size=BS), Timing(max_running=1, time_scale=0.01))
    first = await engine.start(hashes(1, 1), 17, 50)
    waiting = asyncio.ensure_future(engine.start(hashes(1, 2), 17, 1))
    await asyncio.sleep(0.01)
    waiting.cancel()
    await asyncio.sleep(0)
    assert engine.num_waiting == 0
    first.close()
    assert engine.cache.usage == 0
    await engine.close()


async def test_a_full_cache_makes_requests_wait_for_blocks() -> None:
    engine = Engine(cache.PrefixCache(4, block_size=BS), Timing(time_scale=0.01))
    big = await engine.start(hashes(3, 1), 49, 20)
    other = asyncio.ensure_future(engine.start(hashes(2, 5), 33, 1))
    await asyncio.sleep(0.02)
    assert engine.num_waiting == 1 and not other.done()
    async for _ in big.batches():
        pass
    assert (await other).cached == 0
    await engine.close()


async def test_no_latency_mode_answers_at_once_with_the_same_accounting() -> None:
    engine = Engine(cache.PrefixCache(100, block_size=BS), Timing(time_scale=0))
    prompt = hashes(3)
    cold = await engine.start(prompt, 49, 3)
    assert cold.cached == 0
    assert [list(b) async for b in cold.batches()] == [[0, 1, 2]]
    assert (await engine.start(prompt, 49, 1)).cached == 48
