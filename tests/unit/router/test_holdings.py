"""The bounded guesses of what members hold (router.holdings)."""

from kvpin.router import holdings


def test_a_conversation_and_its_head_are_remembered_where_they_went() -> None:
    h = holdings.Holdings()
    h.record("ep/c1", "ep/k", "pod-1", 900, 300)
    h.record("ep/c2", "ep/k", "pod-2", 500, 300)
    held = h.lookup("ep/c1", "ep/k")
    assert held.conversation == ("pod-1", 900)
    assert held.head == {"pod-1": 300, "pod-2": 300}
    assert h.lookup("ep/c3", "ep/other") == holdings.Held(None, {})


def test_the_tables_are_bounded_by_bytes_oldest_first() -> None:
    h = holdings.Holdings(max_bytes=10_000)  # 3/4 for conversations: 37 of 200 bytes
    assert h.max_conversations == 37
    for i in range(40):
        h.record(f"ep/c{i}", "ep/k", "pod-0", i, 1)
    assert len(h) == 37
    assert h.lookup("ep/c2", "ep/k").conversation is None
    assert h.lookup("ep/c3", "ep/k").conversation == ("pod-0", 3)


def test_a_head_keeps_its_most_recent_members_and_departed_members_hold_nothing() -> None:
    h = holdings.Holdings()
    for i in range(6):
        h.record(f"ep/c{i}", "ep/k", f"pod-{i}", 10, 5)
    assert list(h.lookup("ep/x", "ep/k").head) == ["pod-2", "pod-3", "pod-4", "pod-5"]
    h.forget("ep/", {"pod-5", "pod-4"})
    assert h.lookup("ep/c5", "ep/k") == holdings.Held(None, {"pod-2": 5, "pod-3": 5})
    h.forget("other/", {"pod-3"})
    assert h.lookup("ep/c3", "ep/k").conversation == ("pod-3", 10)
