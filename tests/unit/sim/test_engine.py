"""The scheduler on the event loop's clock: prefill cost, contention, cancellation."""

import asyncio
import time
from collections.abc import Callable

from kvpin.sim import cache
from kvpin.sim.engine import Engine, Timing

BS = 16
# 1,000 prefill tokens per second at time scale 0.1: 2,000 uncached tokens take 0.2 s.
TIMING = Timing(prefill_tokens_per_s=1_000, decode_tokens_per_s=100, step_overhead_s=0.001,
                max_batch_tokens=512, max_running=8, time_scale=0.1)  # fmt: skip


FOREVER = 10**9  # max_tokens of a request that holds its slot until closed


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


async def until(condition: Callable[[], bool], within: float = 10.0) -> None:
    """Yield to the engine until `condition` holds (fails after `within` seconds)."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the engine"
        await asyncio.sleep(0.001)


# Wall-clock bounds here are lower bounds only (a loaded machine only makes steps slower);
# what "faster" means is asserted as an order of events, never as a ratio of durations.


async def test_cached_prefixes_reach_the_first_token_sooner() -> None:
    engine = Engine(cache.PrefixCache(1000, block_size=BS), TIMING)
    prompt = hashes(125)  # 2,000 tokens
    cold_cached, cold = await ttft(engine, prompt, 2001)
    assert cold >= 0.2 * 0.9  # 2,000 tokens at 10,000/s of wall time
    # The same prompt again, beside another cold one started at the same moment: the cached
    # one needs one token of prefill, so its first token comes first.
    (warm_cached, warm), (_, other) = await asyncio.gather(
        ttft(engine, prompt, 2001), ttft(engine, hashes(125, start=50_000), 2001)
    )
    await engine.close()
    assert (cold_cached, warm_cached) == (0, 2000)
    assert warm < other


async def test_prefills_contend_for_the_gpu() -> None:
    engine = Engine(cache.PrefixCache(1000, block_size=BS), TIMING)
    results = await asyncio.gather(
        *(ttft(engine, hashes(30, start=20_000 * (i + 2)), 481) for i in range(4))
    )
    await engine.close()
    firsts = [first for _, first in results]
    # Four cold prompts share one prefill budget, oldest first: the last first token cannot
    # come before all 4 x 480 tokens are computed (0.192 s), and they come in arrival order.
    assert max(firsts) >= 4 * 480 / 10_000 * 0.9
    assert firsts == sorted(firsts)


async def test_requests_wait_beyond_max_running() -> None:
    engine = Engine(cache.PrefixCache(1000, block_size=BS), Timing(max_running=1, time_scale=0.01))
    first = await engine.start(hashes(1, 1), 17, FOREVER)
    second = asyncio.ensure_future(engine.start(hashes(1, 2), 17, 1))
    await until(lambda: engine.num_waiting == 1)
    assert engine.num_running == 1
    # once the first is decoding, only the second is without its first token
    await until(lambda: engine.queued_prefill_tokens == 17)  # the second's prompt alone
    assert engine.num_prefilling == 1
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
    first = await engine.start(hashes(1, 1), 17, FOREVER)
    waiting = asyncio.ensure_future(engine.start(hashes(1, 2), 17, 1))
    await until(lambda: engine.num_waiting == 1)
    waiting.cancel()
    await asyncio.sleep(0)
    assert engine.num_waiting == 0
    first.close()
    assert engine.cache.usage == 0
    await engine.close()


async def test_a_full_cache_makes_requests_wait_for_blocks() -> None:
    # 20 tokens at 50 tokens/s: `big` holds 3 of the 4 blocks for at least 0.4 s.
    engine = Engine(cache.PrefixCache(4, block_size=BS), Timing(time_scale=1.0))
    big = await engine.start(hashes(3, 1), 49, 20)
    other = asyncio.ensure_future(engine.start(hashes(2, 5), 33, 1))
    await until(lambda: engine.num_waiting == 1)
    assert not other.done()
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


async def test_tokens_come_out_once_each_in_order_however_they_are_batched() -> None:
    engine = Engine(cache.PrefixCache(100, block_size=BS), Timing(time_scale=0.01))
    generation = await engine.start(hashes(1), 17, 7)
    await until(lambda: engine.num_running == 0)  # every token produced before any is read
    batches = [list(b) async for b in generation.batches()]
    assert batches == [list(range(7))]  # ready together: one batch
    streamed = await engine.start(hashes(1, 50), 17, 5)
    indices = [i async for b in streamed.batches() for i in b]
    assert indices == list(range(5))
    await engine.close()


async def test_a_prompt_too_big_for_the_whole_pool_is_served_uncached() -> None:
    for scale in (0.01, 0):  # scheduled, and with no latency
        engine = Engine(cache.PrefixCache(2, block_size=BS), Timing(time_scale=scale))
        generation = await engine.start(hashes(3), 49, 1)
        assert generation.cached == 0
        assert [list(b) async for b in generation.batches()] == [[0]]
        await engine.close()


async def test_closing_a_generation_twice_releases_its_blocks_once() -> None:
    engine = Engine(cache.PrefixCache(100, block_size=BS), Timing(time_scale=0.01))
    first = await engine.start(hashes(2), 33, FOREVER)
    second = await engine.start(hashes(2), 33, FOREVER)
    assert second.cached == 32
    first.close()
    first.close()
    assert engine.cache.usage == 2 / 100  # still held by the second
    second.close()
    assert engine.cache.usage == 0
    await engine.close()


async def test_decoding_sequences_take_their_share_of_each_steps_token_budget() -> None:
    # 8 sequences decode; each step's budget of 10 tokens leaves 2 for a new 101-token prompt:
    # 50 steps of at least 1 ms of decoding each before its first token (a lower bound).
    timing = Timing(prefill_tokens_per_s=1e9, decode_tokens_per_s=1000, step_overhead_s=0,
                    max_batch_tokens=10, max_running=16, time_scale=1.0)  # fmt: skip
    engine = Engine(cache.PrefixCache(1000, block_size=BS), timing)
    running = [await engine.start(hashes(1, 100 + i), 2, FOREVER) for i in range(8)]
    await until(lambda: all(g._seq.emitted for g in running))  # all are decoding
    _, first = await ttft(engine, hashes(6, 9000)[:1], 101)
    assert first >= 50 * 0.001 * 0.9
    for g in running:
        g.close()
    await engine.close()


async def test_decoding_takes_at_least_one_step_per_token() -> None:
    timing = Timing(decode_tokens_per_s=200, step_overhead_s=0, time_scale=1.0)
    engine = Engine(cache.PrefixCache(100, block_size=BS), timing)
    started = time.monotonic()
    generation = await engine.start(hashes(1), 17, 20)
    async for _ in generation.batches():
        pass
    assert time.monotonic() - started >= 19 / 200 * 0.9  # 19 steps after the first token
    await engine.close()
