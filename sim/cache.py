"""A prefix KV cache like vLLM's automatic prefix caching: hashed blocks, LRU eviction.

Pure (no I/O, no clock). The prompt is cut into blocks of `block_size` tokens; only whole
blocks are cached. Block i's hash chains the hash of block i-1, the block's tokens and a salt
(model and adapter), so a block is reused only when everything before it is identical.

A running request holds references on its blocks; blocks nobody references stay cached but
evictable, least recently used first. When a new request needs more blocks than are free, the
LRU evictable blocks go; if even that is not enough, the request must wait (`CacheFull`), which
is how a pod whose cache is full of running requests queues.

Like vLLM, the last prompt token is always computed, so a prompt that is cached whole still
reports `len - 1` rounded down to whole blocks as cached.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Sequence


class CacheFullError(Exception):
    """Not enough free blocks for this request until others finish."""


def block_hashes(tokens: Sequence[int], *, block_size: int, salt: int = 0) -> list[int]:
    """The chained hashes of the prompt's whole blocks (a partial last block has none).

    Python's tuple-of-int hash is deterministic across processes (only str and bytes hashing is
    randomized), so the same prompt gives the same hashes in every simulator and benchmark.
    """
    hashes: list[int] = []
    parent = salt
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash((parent, tuple(tokens[start : start + block_size])))
        hashes.append(parent)
    return hashes


def cacheable_blocks(prompt_len: int, block_size: int) -> int:
    """How many leading blocks may count as hits: the last token is always computed."""
    return max(prompt_len - 1, 0) // block_size


@dataclasses.dataclass
class CacheStats:
    """Token counters for vLLM's prefix-cache metrics."""

    queried_tokens: int = 0
    hit_tokens: int = 0


class PrefixCache:
    """A fixed pool of `capacity` blocks with reference counts and LRU eviction."""

    def __init__(self, capacity: int, *, block_size: int = 16) -> None:
        if capacity < 0 or block_size < 1:
            raise ValueError("capacity must be >= 0 and block_size >= 1")
        self.capacity = capacity
        self.block_size = block_size
        self._refs: dict[int, int] = {}  # every cached block -> running requests using it
        self._evictable: OrderedDict[int, None] = OrderedDict()  # refs == 0, LRU first
        self.stats = CacheStats()

    @property
    def used(self) -> int:
        """Blocks holding cached or in-use KV."""
        return len(self._refs)

    @property
    def usage(self) -> float:
        """Fraction of blocks referenced by running requests (vLLM's kv_cache_usage_perc)."""
        if not self.capacity:
            return 0.0
        return (len(self._refs) - len(self._evictable)) / self.capacity

    def match(self, hashes: Sequence[int], prompt_len: int) -> int:
        """How many leading blocks are cached now (without touching LRU order)."""
        limit = min(len(hashes), cacheable_blocks(prompt_len, self.block_size))
        hit = 0
        while hit < limit and hashes[hit] in self._refs:
            hit += 1
        return hit

    def acquire(self, hashes: Sequence[int], prompt_len: int) -> int:
        """Reference the request's blocks, evicting LRU blocks for new ones; cached tokens.

        Raises CacheFullError, changing nothing, when the blocks cannot fit yet.
        """
        hit = self.match(hashes, prompt_len)
        new = [h for h in hashes if h not in self._refs]
        in_use = len(self._refs) - len(self._evictable)
        reused = sum(1 for h in hashes if h in self._evictable)
        if in_use + reused + len(new) > self.capacity:
            raise CacheFullError
        # Reference what is cached first, so eviction below cannot take this request's blocks.
        for h in hashes:
            refs = self._refs.get(h)
            if refs is not None:
                if refs == 0:
                    del self._evictable[h]
                self._refs[h] = refs + 1
        for h in new:
            if len(self._refs) >= self.capacity:
                evicted, _ = self._evictable.popitem(last=False)
                del self._refs[evicted]
            self._refs[h] = 1
        self.stats.queried_tokens += prompt_len
        self.stats.hit_tokens += hit * self.block_size
        return hit * self.block_size

    def release(self, hashes: Sequence[int]) -> None:
        """Drop the request's references; unreferenced blocks become evictable, newest last."""
        for h in reversed(hashes):  # the prefix stays longest: evict the tail blocks first
            refs = self._refs.get(h)
            if refs is None:
                continue
            if refs <= 1:
                self._refs[h] = 0
                self._evictable[h] = None
            else:
                self._refs[h] = refs - 1

    def flush(self) -> int:
        """Drop every unreferenced block (vLLM's reset_prefix_cache); how many went."""
        dropped = len(self._evictable)
        for h in self._evictable:
            del self._refs[h]
        self._evictable.clear()
        return dropped
