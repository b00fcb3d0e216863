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
    h = holdings.Holdings(max_bytes=10 * holdings.ENTRY_BYTES)
    for i in range(5):
        h.record(b"", chunks(f"{i}" * (3 * C)), f"pod-{i % 2}")
    assert len(h) == 10
    h.forget({"pod-0"})
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
    assert len(h) == 2  # chunks nobody holds any more leave the table


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
    assert len(expected) == 2 * holdings.HASH_BYTES


def test_the_table_holds_at_least_one_entry_and_as_many_as_its_bytes_allow() -> None:
    assert holdings.Holdings(0).max_entries == 1
    assert holdings.Holdings(holdings.ENTRY_BYTES * 3 + 10).max_entries == 3


def test_taking_back_what_was_never_recorded_changes_nothing() -> None:
    table = holdings.Holdings()
    names = table.record(b"", b"A" * 8 + b"B" * 8, "pod-0")
    assert [n[-8:] for n in names] == [b"A" * 8, b"B" * 8]
    table.retract([b"unknown-name"], "pod-0")
    table.retract(names, "pod-1")
    assert table.held(b"", b"A" * 8 + b"B" * 8) == {"pod-0": 2}
