import pytest

from kvpin.sim import cache

BS = 16


def prompt(*blocks: int, tail: int = 5) -> list[int]:
    """Whole blocks filled with the given values, then a partial tail block."""
    out = [b for b in blocks for _ in range(BS)]
    return out + list(range(1000, 1000 + tail))


def acquire(c: cache.PrefixCache, tokens: list[int]) -> int:
    hashes = cache.block_hashes(tokens, block_size=BS)
    cached = c.acquire(hashes, len(tokens))
    c.release(hashes)
    return cached


@pytest.mark.parametrize("k", [0, 1, 2, 5])
def test_sharing_k_whole_blocks_reports_16k_cached_tokens(k: int) -> None:
    c = cache.PrefixCache(100, block_size=BS)
    shared = list(range(1, k + 1))
    assert acquire(c, prompt(*shared, 91, 92)) == 0
    assert acquire(c, prompt(*shared, 93, 94)) == BS * k


def test_hashes_chain_so_a_changed_block_breaks_everything_after_it() -> None:
    a = cache.block_hashes(prompt(1, 2, 3), block_size=BS)
    b = cache.block_hashes(prompt(9, 2, 3), block_size=BS)
    assert len(a) == 3  # the partial tail block has no hash
    assert all(x != y for x, y in zip(a, b, strict=True))
    assert cache.block_hashes(prompt(1, 2, 3), block_size=BS, salt=7)[0] != a[0]


def test_the_last_token_is_always_computed() -> None:
    c = cache.PrefixCache(100, block_size=BS)
    exact = prompt(1, 2, tail=0)  # exactly two blocks
    acquire(c, exact)
    assert acquire(c, exact) == BS  # not 32: the last block holds the last token


def test_least_recently_used_blocks_are_evicted_first() -> None:
    c = cache.PrefixCache(4, block_size=BS)
    acquire(c, prompt(1, 2))  # blocks A1 A2
    acquire(c, prompt(3, 4))  # blocks B1 B2: the cache is full
    assert acquire(c, prompt(1, 2)) == 2 * BS  # touches A: B is now least recent
    acquire(c, prompt(5, 6))  # evicts B
    assert acquire(c, prompt(3, 4)) == 0
    assert acquire(c, prompt(5, 6)) == 2 * BS


def test_tail_blocks_go_before_their_prefix() -> None:
    c = cache.PrefixCache(3, block_size=BS)
    acquire(c, prompt(1, 2, 3))
    acquire(c, prompt(7))  # one block evicted: the tail of the older prompt
    assert acquire(c, prompt(1, 2, 8)) == 2 * BS


def test_running_requests_pin_their_blocks() -> None:
    c = cache.PrefixCache(3, block_size=BS)
    held = cache.block_hashes(prompt(1, 2), block_size=BS)
    c.acquire(held, 40)
    assert c.usage == pytest.approx(2 / 3)
    with pytest.raises(cache.CacheFullError):
        c.acquire(cache.block_hashes(prompt(3, 4), block_size=BS), 40)
    assert c.used == 2  # a refused request changes nothing
    c.release(held)
    assert c.usage == 0
    assert acquire(c, prompt(3, 4)) == 0
    assert acquire(c, prompt(1, 9)) == BS  # block 1 survived, block 2 was evicted


def test_flush_drops_only_unreferenced_blocks() -> None:
    c = cache.PrefixCache(10, block_size=BS)
    acquire(c, prompt(1, 2))
    held = cache.block_hashes(prompt(3), block_size=BS)
    c.acquire(held, 20)
    assert c.flush() == 2
    assert c.used == 1
    assert acquire(c, prompt(1, 2)) == 0


def test_stats_count_queried_and_hit_tokens() -> None:
    c = cache.PrefixCache(10, block_size=BS)
    acquire(c, prompt(1, 2))
    acquire(c, prompt(1, 3))
    assert (c.stats.queried_tokens, c.stats.hit_tokens) == (2 * (2 * BS + 5), BS)


def test_only_whole_blocks_are_hashed_and_cached() -> None:
    assert len(cache.block_hashes(list(range(31)), block_size=BS)) == 1
    assert len(cache.block_hashes(list(range(32)), block_size=BS)) == 2
    assert cache.cacheable_blocks(0, 1) == 0 and cache.cacheable_blocks(1, 1) == 0
    assert cache.cacheable_blocks(33, BS) == 2 and cache.cacheable_blocks(32, BS) == 1


def test_sizes_are_checked_and_the_limits_themselves_accepted() -> None:
    cache.PrefixCache(0, block_size=1)
    for capacity, block_size in ((-1, 16), (10, 0)):
        with pytest.raises(ValueError) as refused:
            cache.PrefixCache(capacity, block_size=block_size)
        assert str(refused.value) == "capacity must be >= 0 and block_size >= 1"


def test_a_request_fits_exactly_when_its_blocks_and_the_running_ones_fill_the_pool() -> None:
    pool = cache.PrefixCache(4, block_size=BS)
    old = cache.block_hashes(list(range(1000, 1000 + 2 * BS + 1)), block_size=BS)
    pool.acquire(old, 2 * BS + 1)
    pool.release(old)  # 2 blocks cached, evictable
    running = cache.block_hashes(list(range(3000, 3000 + 2 * BS + 1)), block_size=BS)
    pool.acquire(running, 2 * BS + 1)  # two free blocks: nothing evicted
    assert pool.used == 4
    # the old prompt again: 2 running + its 2 evictable blocks reused = 4: fits exactly
    assert pool.acquire(old, 2 * BS + 1) == 2 * BS
    with pytest.raises(cache.CacheFullError):  # a fifth block cannot be found
        pool.acquire(cache.block_hashes(list(range(5000, 5000 + BS + 1)), block_size=BS), BS + 1)


def test_reused_evictable_blocks_count_against_the_pool() -> None:
    pool = cache.PrefixCache(3, block_size=BS)
    a = cache.block_hashes(list(range(2 * BS + 1)), block_size=BS)
    pool.acquire(a, 2 * BS + 1)
    pool.release(a)  # two evictable blocks
    b = cache.block_hashes(list(range(500, 500 + 2 * BS + 1)), block_size=BS)
    pool.acquire(b, 2 * BS + 1)  # takes one free block and evicts a's tail
    # a again: its head (still cached) is reused and its tail is new: 2 running + 2 = 4 > 3
    with pytest.raises(cache.CacheFullError):
        pool.acquire(a, 2 * BS + 1)
    assert pool.usage == 2 / 3  # nothing changed


def test_hit_statistics_accumulate() -> None:
    pool = cache.PrefixCache(10, block_size=BS)
    prompt = cache.block_hashes(list(range(2 * BS + 1)), block_size=BS)
    pool.acquire(prompt, 2 * BS + 1)
    pool.release(prompt)
    pool.acquire(prompt, 2 * BS + 1)
    pool.release(prompt)
    pool.acquire(prompt, 2 * BS + 1)
    assert (pool.stats.queried_tokens, pool.stats.hit_tokens) == (3 * (2 * BS + 1), 4 * BS)


def test_shared_blocks_stay_referenced_until_the_last_request_lets_go() -> None:
    pool = cache.PrefixCache(10, block_size=BS)
    prompt = cache.block_hashes(list(range(2 * BS + 1)), block_size=BS)
    for _ in range(3):
        pool.acquire(prompt, 2 * BS + 1)
    pool.release(prompt)
    pool.release(prompt)
    assert pool.usage == 2 / 10  # one request still holds both blocks
    assert pool.flush() == 0
    pool.release(prompt)
    assert pool.usage == 0
    pool.release(cache.block_hashes(list(range(900, 900 + BS + 1)), block_size=BS))  # unknown
    assert pool.flush() == 2


def test_blocks_held_by_a_running_request_are_hits_for_another() -> None:
    pool = cache.PrefixCache(10, block_size=BS)
    prompt = cache.block_hashes(list(range(3 * BS + 1)), block_size=BS)
    assert pool.acquire(prompt, 3 * BS + 1) == 0  # still running: never released
    assert pool.acquire(prompt, 3 * BS + 1) == 3 * BS
