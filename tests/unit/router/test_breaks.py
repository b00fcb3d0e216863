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
