from kvpin.router import breaks, keys


def zones(system: str = "sys", tools: str = "", *history: str) -> breaks.Turn:
    return breaks.fingerprint(keys.Zones(system, tools, tuple(("user", h) for h in history)))


def test_append_only_turns_do_not_break() -> None:
    d = breaks.BreakDetector()
    assert d.observe("c", zones("sys", "", "a")) is None
    assert d.observe("c", zones("sys", "", "a", "b", "c")) is None


def test_each_zone_is_named() -> None:
    d = breaks.BreakDetector()
    d.observe("c", zones("sys", "t", "a", "b"))
    assert d.observe("c", zones("sys 12:00", "t", "a", "b", "c")) == "system"
    assert d.observe("c", zones("sys 12:00", "t2", "a", "b", "c")) == "tools"
    assert d.observe("c", zones("sys 12:00", "t2", "a", "B", "c")) == "history"
    assert d.observe("c", zones("sys 12:00", "t2", "a")) == "history"  # dropped turns


def test_memory_is_bounded() -> None:
    d = breaks.BreakDetector(capacity=3)
    for i in range(10):
        d.observe(str(i), zones())
    assert len(d) == 3
    assert d.observe("0", zones("changed")) is None  # forgotten: nothing to compare with


def test_the_record_kept_per_conversation_has_one_size_whatever_the_history() -> None:
    short, long = zones("s", "", "a"), zones("s", "", *map(str, range(5000)))
    assert len(short.record()) == len(long.record()) == 28
    d = breaks.BreakDetector()
    d.observe("c", long)
    assert d.observe("c", zones("s", "", *map(str, range(5001)))) is None
    assert d.observe("c", zones("s", "", *map(str, range(4999)), "x", "y")) == "history"


def test_the_same_turn_again_is_no_break_and_roles_count() -> None:
    d = breaks.BreakDetector()
    d.observe("c", zones("sys", "", "a", "b"))
    assert d.observe("c", zones("sys", "", "a", "b")) is None  # a retry of the same turn
    as_assistant = breaks.fingerprint(keys.Zones("sys", "", (("user", "a"), ("assistant", "b"))))
    assert d.observe("c", as_assistant) == "history"
    first = breaks.fingerprint(keys.Zones("sys", "", ()))
    assert first.rolling_at(0) == b"" and first.count == 0
    d.observe("new", first)
    assert d.observe("new", zones("sys", "", "anything")) is None  # nothing to extend yet


def test_fingerprints_survive_lone_surrogates_and_follow_the_documented_hashes() -> None:
    import hashlib

    def h(data: bytes) -> bytes:
        return hashlib.blake2b(data, digest_size=8).digest()

    turn = breaks.fingerprint(keys.Zones("s\ud800", "", (("user\udc00", "x\ud801"),)))
    assert turn.system == h("s\ud800".encode("utf-8", "surrogatepass"))
    text = h("x\ud801".encode("utf-8", "surrogatepass"))
    assert turn.rolling == h("user\udc00".encode("utf-8", "surrogatepass") + b"\0" + text)
