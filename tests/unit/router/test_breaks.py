from kvpin import api
from kvpin.router import breaks, holdings, keys

POD_A, POD_B, POD_C = (api.RingMember(f"pod-{x}", f"10.0.0.{i}:8000") for i, x in enumerate("abc"))


def zones(system: str = "sys", tools: str = "", *history: str) -> breaks.Turn:
    return breaks.fingerprint(keys.Zones(system, tools, tuple(("user", h) for h in history)))


def test_append_only_turns_do_not_break() -> None:
    d = breaks.BreakDetector()
    assert d.observe("c", zones("sys", "", "a")).broken is None
    assert d.observe("c", zones("sys", "", "a", "b", "c")).broken is None


def test_each_zone_is_named() -> None:
    d = breaks.BreakDetector()
    d.observe("c", zones("sys", "t", "a", "b"))
    assert d.observe("c", zones("sys 12:00", "t", "a", "b", "c")).broken == "system"
    assert d.observe("c", zones("sys 12:00", "t2", "a", "b", "c")).broken == "tools"
    assert d.observe("c", zones("sys 12:00", "t2", "a", "B", "c")).broken == "history"
    assert d.observe("c", zones("sys 12:00", "t2", "a")).broken == "history"  # dropped turns


def routed(z: keys.Zones) -> breaks.Turn:
    """A turn fingerprinted with its prompt's chunk names, as the router does."""
    return breaks.fingerprint(z, holdings.chunk_names(z))


def test_a_last_message_that_grew_is_no_break_but_one_rewritten_is() -> None:
    story = "Once upon a time there was a king. " * 300  # 10,500 characters: 5 whole chunks
    d = breaks.BreakDetector()
    for text, zone in ((story, None), (story + " He had three sons.", None),
                       (story + " He had three sons. The eldest...", None),
                       ("Twice" + story[4:], "history")):  # fmt: skip
        assert d.observe("c", routed(keys.parse_zones({"prompt": text}))).broken == zone
    # chat: a last user message extended keeps the cache too; an earlier one rewritten does not
    chat = (("user", story), ("assistant", "ok"), ("user", story))
    d.observe("chat", routed(keys.Zones("s", "", chat)))
    grown = (*chat[:2], ("user", story + " and more"))
    edited = (("user", "x" + story), *chat[1:])
    for history, zone in ((grown, None), (edited, "history")):
        assert d.observe("chat", routed(keys.Zones("s", "", history))).broken == zone


def test_memory_is_bounded() -> None:
    d = breaks.BreakDetector(capacity=3)
    for i in range(10):
        d.observe(str(i), zones())
    assert len(d) == 3
    assert d.observe("0", zones("changed")).broken is None  # forgotten: nothing to compare with


def test_the_record_kept_per_conversation_has_one_size_whatever_the_history() -> None:
    short, long = zones("s", "", "a"), zones("s", "", *map(str, range(5000)))
    assert len(short.record()) == len(long.record()) == 48
    d = breaks.BreakDetector()
    d.observe("c", long)
    assert d.observe("c", zones("s", "", *map(str, range(5001)))).broken is None
    assert d.observe("c", zones("s", "", *map(str, range(4999)), "x", "y")).broken == "history"


def test_the_same_turn_again_is_no_break_and_roles_count() -> None:
    d = breaks.BreakDetector()
    d.observe("c", zones("sys", "", "a", "b"))
    assert d.observe("c", zones("sys", "", "a", "b")).broken is None  # a retry of the same turn
    as_assistant = breaks.fingerprint(keys.Zones("sys", "", (("user", "a"), ("assistant", "b"))))
    assert d.observe("c", as_assistant).broken == "history"
    first = breaks.fingerprint(keys.Zones("sys", "", ()))
    assert first.rolling_at(0) == b"" and first.count == 0
    d.observe("new", first)
    assert d.observe("new", zones("sys", "", "anything")).broken is None  # nothing to extend yet


def test_fingerprints_survive_lone_surrogates_and_follow_the_documented_hashes() -> None:
    import hashlib

    def h(data: bytes) -> bytes:
        return hashlib.blake2b(data, digest_size=8).digest()

    turn = breaks.fingerprint(keys.Zones("s\ud800", "", (("user\udc00", "x\ud801"),)))
    assert turn.system == h("s\ud800".encode("utf-8", "surrogatepass"))
    text = h("x\ud801".encode("utf-8", "surrogatepass"))
    assert turn.rolling == h("user\udc00".encode("utf-8", "surrogatepass") + b"\0" + text)


def test_a_continuing_turn_learns_where_its_previous_one_went() -> None:
    story = "Once upon a time there was a king. " * 300  # 10,500 characters: 5 whole chunks
    d = breaks.BreakDetector()
    assert d.observe("c", routed(keys.parse_zones({"prompt": story}))) == breaks.Seen()
    d.sent("c", POD_B)
    d.sent("c", POD_C)  # a retry: the last member sent to is the one remembered
    seen = d.observe("c", routed(keys.parse_zones({"prompt": story + " He had three sons."})))
    assert seen == breaks.Seen(None, POD_C, len(story))  # and the size of what it sent
    # not sent yet (its attempt failed before a member was chosen): no member to presume
    assert d.observe("c", routed(keys.parse_zones({"prompt": story + " More."}))).member is None
    d.sent("c", POD_A)
    # a broken prefix: the previous turn's cache is no use, so neither is where it went
    seen = d.observe("c", routed(keys.parse_zones({"prompt": "Twice" + story[4:]})))
    assert seen == breaks.Seen("history", None)


def chat(*history: tuple[str, str]) -> breaks.Turn:
    return breaks.fingerprint(keys.Zones("sys", "", history))


def test_the_size_of_the_turn_sent_is_known_only_for_the_turn_right_before() -> None:
    d = breaks.BreakDetector()
    u1, a1, u2 = ("user", "hi"), ("assistant", "hello there"), ("user", "how much?")
    d.observe("c", chat(u1))
    d.sent("c", POD_A)
    assert d.observe("c", chat(u1, a1, u2)) == breaks.Seen(None, POD_A, len("sys" + "hi"))
    d.sent("c", POD_B)
    # two answers more: another replica sent the turn in between; where it went is unknown
    a2, u3, a3, u4 = ("assistant", "12"), ("user", "ok"), ("assistant", "yes"), ("user", "?")
    assert d.observe("c", chat(u1, a1, u2, a2, u3, a3, u4)) == breaks.Seen(None, POD_B, 0)
    d.sent("c", POD_C)
    # an agent's tool call and its results: one answer, the next turn
    call, result = ("assistant", "call lookup()"), ("tool", "42")
    size = len("sys") + sum(len(t) for _, t in (u1, a1, u2, a2, u3, a3, u4))
    seen = d.observe("c", chat(u1, a1, u2, a2, u3, a3, u4, call, result, result))
    assert seen == breaks.Seen(None, POD_C, size)


def test_sending_a_conversation_the_detector_forgot_remembers_nothing() -> None:
    d = breaks.BreakDetector(capacity=1)
    d.observe("a", zones())
    d.observe("b", zones())  # a is evicted
    d.sent("a", POD_A)
    assert len(d) == 1
    assert d.observe("a", zones("sys", "", "x")) == breaks.Seen()
