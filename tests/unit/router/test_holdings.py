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
