"""The bounded guesses of what members hold (router.holdings)."""

from kvpin.router import holdings, keys

C = holdings.CHUNK_CHARS


def chunks(*history: str, system: str = "") -> bytes:
    return holdings.chunk_names(keys.Zones(system, "", tuple(("user", h) for h in history)))


def test_prompts_share_the_names_of_exactly_the_chunks_of_their_shared_prefix() -> None:
    a = chunks("x" * (3 * C))
    b = chunks("x" * (2 * C) + "y" * C)
    assert len(a) == len(b) == 3 * holdings.HASH_BYTES  # "user\0" and separators: 3 whole
    assert a[:16] == b[:16] and a[16:] != b[16:]
    assert chunks("x" * (3 * C), "more")[:24] == a  # a later turn extends the names


def test_each_member_holds_the_leading_run_of_chunks_it_was_sent() -> None:
    h = holdings.Holdings()
    turn1 = chunks("x" * (3 * C))
    turn2 = chunks("x" * (3 * C), "y" * (2 * C))
    other = chunks("x" * C + "z" * (2 * C))
    h.record(b"", turn1, "pod-1")
    h.record(b"", other, "pod-2")
    assert h.held(b"", turn2) == {"pod-1": 3, "pod-2": 1}
    assert h.held(b"salt", turn2) == {}  # another cache salt shares nothing


def test_the_table_is_bounded_and_departed_members_hold_nothing() -> None:
    h = holdings.Holdings(max_bytes=round(10 * holdings.ENTRY_BYTES / (1 - holdings.GHOSTS_SHARE)))
    for i in range(5):
        h.record(b"", chunks(f"{i}" * (3 * C)), f"pod-{i % 2}")
    assert len(h) == h.max_entries == 10
    h.forget({"pod-0", "pod-never-sent-anything"})
    assert h.held(b"", chunks("4" * (3 * C))) == {}
    assert h.held(b"", chunks("3" * (3 * C))) == {"pod-1": 3}


def test_a_refused_prompt_is_taken_back_without_what_the_member_held_before() -> None:
    h = holdings.Holdings()
    head = chunks("x" * (2 * C))
    h.record(b"", head, "pod-1")
    h.record(b"", head, "pod-2")
    longer = chunks("x" * (2 * C), "y" * (2 * C))
    added = h.record(b"", longer, "pod-1")
    assert h.held(b"", longer) == {"pod-1": 4, "pod-2": 2}
    h.retract(added, "pod-1")  # the engine refused it: only the new chunks go
    assert h.held(b"", longer) == {"pod-1": 2, "pod-2": 2}
    assert len(h) == 4  # each member's head, nothing of the refused turn


def test_chunk_names_hash_the_documented_stream_at_every_chunk_boundary() -> None:
    import hashlib

    zones = keys.Zones("s" * 4000, "t" * 200, (("user", "u\ud800" * 2500), ("bot", "b" * 10)))
    stream = ("s" * 4000 + "\x1f" + "t" * 200 + "\x1f" + "user\0" + "u\ud800" * 2500 + "\x1e"
              + "bot\0" + "b" * 10 + "\x1e")  # fmt: skip
    size = holdings.CHUNK_CHARS
    expected = b"".join(
        hashlib.blake2b(stream[: (i + 1) * size].encode("utf-8", "surrogatepass"),
                        digest_size=holdings.HASH_BYTES).digest()
        for i in range(len(stream) // size)
    )  # fmt: skip
    assert holdings.chunk_names(zones) == expected
    assert len(expected) >= 2 * holdings.HASH_BYTES  # several boundaries are checked


def test_a_chunk_ending_past_the_system_prompt_and_tools_holds_the_conversation() -> None:
    def zones(system: str, tools: str, user: str) -> keys.Zones:
        return keys.Zones(system, tools, (("user", user),))

    assert holdings.head_chars(zones("", "", "hi")) == 0  # no head: nothing shared
    assert holdings.head_chars(keys.Zones("s", "", ())) == 3
    # two conversations with one head: chunks named alike up to where their own text begins
    # ("user\0" after the separators), apart from the chunk ending a character past it
    for tools in (C - 8, C - 7):
        one, two = zones("s" * C, "t" * tools, "a" * C), zones("s" * C, "t" * tools, "b" * C)
        begins = holdings.head_chars(one)
        assert begins == C + 1 + tools + 1 + 5
        a, b = holdings.chunk_names(one), holdings.chunk_names(two)
        assert a[:8] == b[:8]  # chunk 1: all head
        assert (a[8:16] == b[8:16]) is (begins >= 2 * C)  # chunk 2 ends at 2C
        assert holdings.first_turn_chars(one) == begins + C  # and its first message
    assert holdings.first_turn_chars(keys.Zones("s", "", ())) == 3


def test_the_table_holds_at_least_one_entry_and_as_many_as_its_bytes_allow() -> None:
    assert holdings.Holdings(0).max_entries == 1
    table = holdings.Holdings(holdings.ENTRY_BYTES * 4 + 10)  # a quarter for what it trimmed
    assert (table.max_entries, table.max_ghosts) == (3, 1)


def test_taking_back_what_was_never_recorded_changes_nothing() -> None:
    table = holdings.Holdings()
    names = table.record(b"", b"A" * 8 + b"B" * 8, "pod-0")
    assert sorted(n[-8:] for n in names) == [b"A" * 8, b"B" * 8]
    table.retract([b"unknown-name"], "pod-0")
    table.retract(names, "pod-1")
    assert table.held(b"", b"A" * 8 + b"B" * 8) == {"pod-0": 2}


def test_a_member_drops_the_chunks_least_recently_sent_beyond_its_cache() -> None:
    h = holdings.Holdings()
    h.resize("pod-1", 4)
    first, second = chunks("a" * (3 * C)), chunks("b" * (3 * C))
    h.record(b"", first, "pod-1")
    h.record(b"", second, "pod-1")  # 6 chunks into room for 4: first's tail goes first
    assert h.held(b"", first) == {"pod-1": 1}
    assert h.held(b"", second) == {"pod-1": 3}
    assert len(h) == 4


def test_a_prefix_sent_again_outlives_one_that_was_not() -> None:
    h = holdings.Holdings()
    h.resize("pod-1", 4)
    a, b, c = chunks("a" * (2 * C)), chunks("b" * (2 * C)), chunks("c" * (2 * C))
    for prompt in (a, b, a, c):  # a sent again after b: b is the least recent when c comes
        h.record(b"", prompt, "pod-1")
    assert h.held(b"", a) == {"pod-1": 2}
    assert h.held(b"", b) == {}
    h.resize("pod-2", 1)  # a cache too small for a chunk still keeps the last one sent
    h.record(b"", a, "pod-2")
    assert h.held(b"", a) == {"pod-1": 2, "pod-2": 1}


def test_the_index_guesses_evictions_as_the_simulated_engine_makes_them() -> None:
    """The same prompts into router.holdings and into kvpin sim's LRU cache (a request's tail
    blocks freed first, as vLLM does): the whole chunks held agree with the engine's blocks."""
    from kvpin.sim import cache

    per_chunk, room = 4, 6  # blocks of one token, four to a chunk; room for six chunks
    engine = cache.PrefixCache(room * per_chunk, block_size=1)
    h = holdings.Holdings()
    h.resize("pod", room)

    def names(hashes: list[int]) -> bytes:  # a chunk is named by its last block's chained hash
        ends = hashes[per_chunk - 1 :: per_chunk]
        return b"".join(end.to_bytes(8, "big", signed=True) for end in ends)

    prompts = [
        [t * 100 + i for i in range(n * per_chunk)]
        for t, n in ((1, 2), (2, 3), (1, 2), (3, 2), (2, 3), (4, 1), (1, 3), (3, 2))
    ]
    for tokens in prompts:
        hashes = cache.block_hashes(tokens, block_size=1)
        engine.acquire(hashes, len(tokens) + 1)
        engine.release(hashes)
        h.record(b"", names(hashes), "pod")
        for earlier in prompts:
            hashes = cache.block_hashes(earlier, block_size=1)
            held = engine.match(hashes, len(earlier) + 1) // per_chunk
            assert h.held(b"", names(hashes)).get("pod", 0) == held
    assert h.held(b"", names(cache.block_hashes(prompts[1], block_size=1))) == {}  # evicted


def test_prompts_queued_on_a_member_evict_nothing_until_it_admits_them() -> None:
    h = holdings.Holdings()
    h.resize("pod", 6)
    a, b, c, d = (chunks(x * (n * C)) for x, n in (("a", 2), ("b", 3), ("c", 3), ("d", 2)))
    h.record(b"", a, "pod")
    h.record(b"", b, "pod")
    h.admitting("pod", 5)  # c and d sent, waiting in the engine's queue
    h.record(b"", c, "pod")
    h.record(b"", d, "pod")
    assert [h.held(b"", p) for p in (a, b, c, d)] == [{"pod": n} for n in (2, 3, 3, 2)]
    h.admitting("pod", 2)  # c admitted: its blocks took the least recent, a's
    assert [h.held(b"", p) for p in (a, b, c, d)] == [{}, {"pod": 3}, {"pod": 3}, {"pod": 2}]
    h.admitting("pod", 0)  # d too: then b's tail
    assert [h.held(b"", p) for p in (a, b, c, d)] == [{}, {"pod": 1}, {"pod": 3}, {"pod": 2}]
    h.admitting("pod", 5)
    h.forget(["pod"])
    h.resize("pod", 6)
    for prompt in (b, c, d):
        h.record(b"", prompt, "pod")
    assert h.held(b"", b) == {"pod": 1}  # a member that left takes its queue with it


def test_what_the_index_trims_is_remembered_for_the_member_it_left() -> None:
    h = holdings.Holdings()
    h.resize("pod-1", 4)
    a, b = chunks("a" * (3 * C)), chunks("b" * (2 * C))
    h.record(b"", a, "pod-1")
    h.record(b"", b, "pod-1")  # a's tail chunk trimmed to make room
    assert h.held(b"", a) == {"pod-1": 2}
    assert h.trimmed(b"", a, h.held(b"", a)) == {"pod-1": 1}
    h.record(b"", chunks("c" * (4 * C)), "pod-1")  # all of a and b trimmed
    assert h.held(b"", a) == {}
    assert h.trimmed(b"", a, {}) == {"pod-1": 3}
    assert h.trimmed(b"salt", a, {}) == {}
    later = chunks("a" * (3 * C), "more" * C)  # its own last chunk was never sent
    assert h.trimmed(b"", later, {}) == {"pod-1": 3}
    assert h.trimmed(b"", later, {"pod-2": 1}) == {"pod-1": 3}  # another's run: not its trim
    c = chunks("c" * (4 * C))
    assert h.trimmed(b"", c, h.held(b"", c)) == {}


def test_a_trimmed_chunk_sent_again_or_held_by_a_member_that_left_is_no_ghost() -> None:
    h = holdings.Holdings()
    h.resize("pod-1", 2)
    a, b = chunks("a" * (2 * C)), chunks("b" * (2 * C))
    h.record(b"", a, "pod-1")
    h.record(b"", b, "pod-1")
    h.record(b"", a, "pod-2")  # sent again, elsewhere: held there, not a ghost of pod-1
    assert h.trimmed(b"", a, {}) == {}
    h.record(b"", a, "pod-1")  # b trimmed in turn
    assert h.trimmed(b"", b, {}) == {"pod-1": 2}
    h.forget(["pod-1"])
    assert h.trimmed(b"", b, {}) == {}


def test_the_ghosts_are_bounded_oldest_first() -> None:
    h = holdings.Holdings(max_bytes=round(4 * holdings.ENTRY_BYTES / holdings.GHOSTS_SHARE))
    assert h.max_ghosts == 4
    h.resize("pod", 1)
    prompts = [chunks(f"{i}" * (2 * C)) for i in range(4)]
    for prompt in prompts:
        h.record(b"", prompt, "pod")  # keeps one chunk, trims the rest
    assert h.ghosts == 4
    assert h.trimmed(b"", prompts[0], {}) == {}  # its ghosts made room for later ones
    assert h.trimmed(b"", prompts[2], {}) == {"pod": 2}
