from kvpin.router import breaks, holdings, keys


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


def routed(z: keys.Zones) -> breaks.Turn:
    """A turn fingerprinted with its prompt's chunk names, as the router does."""
    return breaks.fingerprint(z, holdings.chunk_names(z))


def test_a_last_message_that_grew_is_no_break_but_one_rewritten_is() -> None:
    story = "Once upon a time there was a king. " * 300  # 10,500 characters: 5 whole chunks
    d = breaks.BreakDetector()
    for text, zone in ((story, None), (story + " He had three sons.", None),
                       (story + " He had three sons. The eldest...", None),
                       ("Twice" + story[4:], "history")):  # fmt: skip
        assert d.observe("c", routed(keys.parse_zones({"prompt": text}))) == zone
    # chat: a last user message extended keeps the cache too; an earlier one rewritten does not
    chat = (("user", story), ("assistant", "ok"), ("user", story))
    d.observe("chat", routed(keys.Zones("s", "", chat)))
    grown = (*chat[:2], ("user", story + " and more"))
    edited = (("user", "x" + story), *chat[1:])
    for history, zone in ((grown, None), (edited, "history")):
        assert d.observe("chat", routed(keys.Zones("s", "", history))) == zone


def test_memory_is_bounded() -> None:
    d = breaks.BreakDetector(capacity=3)
    for i in range(10):
        d.observe(str(i), zones())
    assert len(d) == 3
    assert d.observe("0", zones("changed")) is None  # forgotten: nothing to compare with


def test_the_record_kept_per_conversation_has_one_size_whatever_the_history() -> None:
    short, long = zones("s", "", "a"), zones("s", "", *map(str, range(5000)))
    assert len(short.record()) == len(long.record()) == 40
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
