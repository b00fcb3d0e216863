from kvpin.router import keys

SYSTEM = "You are the support agent of a large shop. " * 80  # ~3,500 characters
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"b": 1, "a": 2}}}]


def chat(*turns: str, system: str = SYSTEM, tools=TOOLS, **extra) -> dict:
    messages = [{"role": "system", "content": system}]
    for i, text in enumerate(turns):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    return {"model": "ep", "messages": messages, "tools": tools, **extra}


def key(
    body: dict, mode: str = "prefix", headers: dict | None = None, prefix_chars: int = 2048
) -> str:
    zones = keys.parse_zones(body)
    session = keys.session_of(headers or {}, body.get("user"), "X-Session-ID")
    head = keys.head(zones, keys.HEAD_CHARS)
    return keys.routing_key(mode, "ep", head, session, prefix_chars=prefix_chars)


def test_every_turn_of_a_conversation_has_the_same_key() -> None:
    turns = ["Where is my order 1234?", "Let me check.", "Thanks", "It ships tomorrow.", "Great"]
    assert len({key(chat(*turns[: n + 1])) for n in range(0, 5, 2)}) == 1


def test_a_long_shared_system_prompt_shares_the_key() -> None:
    assert key(chat("What is 2+2?")) == key(chat("Name a color."))


def test_with_a_short_system_prompt_conversations_get_their_own_keys() -> None:
    short = "You are helpful."
    a = key(chat("What is 2+2?", system=short))
    b = key(chat("Name a color.", system=short))
    assert a != b
    assert key(chat("What is 2+2?", "4", "And 3+3?", system=short)) == a


def test_the_head_is_canonical() -> None:
    reordered = [
        {"function": {"parameters": {"a": 2, "b": 1}, "name": "lookup"}, "type": "function"}
    ]
    assert key(chat("hi", tools=reordered)) == key(chat("hi"))
    parts = chat("hi")
    parts["messages"][0]["content"] = [{"type": "text", "text": SYSTEM}]
    assert key(parts) == key(chat("hi"))


def test_session_mode_uses_the_header_then_user_then_the_prefix() -> None:
    a = key(chat("hi"), "session", {"X-Session-ID": "s-1"})
    assert a == key(chat("other", system="x"), "session", {"X-Session-ID": "s-1"})
    assert key(chat("hi", user="u-7"), "session") == key(chat("yo", user="u-7"), "session")
    assert key(chat("hi"), "session") == key(chat("hi"))


def test_endpoint_mode_ignores_the_request() -> None:
    assert key(chat("a"), "endpoint") == key(chat("b", system="c"), "endpoint")


def test_completions_and_odd_bodies_never_raise() -> None:
    assert key({"model": "ep", "prompt": "hello"}) != key({"model": "ep", "prompt": "bye"})
    for odd in ({}, {"messages": [1, None, {"content": {"x": 1}}]}, {"prompt": [1, 2]}):
        assert len(key(odd)) == 16


def conversation(body: dict, session: str | None = None) -> str:
    return keys.conversation_id(keys.opening(keys.parse_zones(body)), session)


def test_conversation_id_survives_edits_of_the_system_prompt() -> None:
    a = conversation(chat("Where is my order?"))
    assert conversation(chat("Where is my order?", system="v2")) == a
    assert conversation(chat("Other")) != a
    assert conversation(chat("x"), "s-1") == conversation(chat("y"), "s-1") != a


def test_a_shorter_head_is_a_prefix_of_a_longer_one() -> None:
    zones = keys.parse_zones(chat("What is 2+2?", system="short"))
    full = keys.head(zones, keys.HEAD_CHARS)
    assert all(keys.head(zones, n) == full[:n] for n in (1, 5, 6, 30, 200))


def test_a_cache_salt_separates_prefix_keys() -> None:
    head = keys.head(keys.parse_zones(chat("hi")), keys.HEAD_CHARS)
    plain = keys.routing_key("prefix", "ep", head, None, prefix_chars=2048)
    salted = keys.routing_key("prefix", "ep", head, None, prefix_chars=2048, salt="tenant-a")
    assert plain != salted


def test_a_conversation_sent_as_one_growing_message_keeps_its_opening() -> None:
    first = "document " * 2000
    assert conversation({"messages": [{"role": "user", "content": first}]}) == conversation(
        {"messages": [{"role": "user", "content": first + " and a follow-up"}]}
    )


# The exact key format is a contract between router replicas: during a rolling upgrade of the
# router, old and new replicas must place a conversation the same way. It is written out here
# from the module's documentation (BLAKE2b, 8 bytes, each part UTF-8 then 0x1f).
def blake(*parts: str) -> str:
    import hashlib

    h = hashlib.blake2b(digest_size=8)
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass") + b"\x1f")
    return h.hexdigest()


def test_keys_are_the_documented_digests() -> None:
    assert keys.digest("a", "b") == blake("a", "b") != blake("ab")
    assert keys.digest("\ud800 lone surrogate") == blake("\ud800 lone surrogate")
    assert keys.routing_key("endpoint", "ep", "head", "s", prefix_chars=2) == blake(
        "endpoint", "ep"
    )
    assert keys.routing_key("session", "ep", "head", "s", prefix_chars=2) == blake("session", "s")
    assert keys.routing_key("session", "ep", "head", None, prefix_chars=2) == blake(
        "prefix", "", "he"
    )
    assert keys.routing_key("prefix", "ep", "head", "s", prefix_chars=3, salt="t") == blake(
        "prefix", "t", "hea"
    )
    zones = keys.parse_zones({"messages": [{"role": "user", "content": "hi"}]})
    assert keys.opening(zones) == blake("conversation", "user", "hi")
    assert keys.opening(keys.Zones("", "", ())) == blake("conversation", "", "")
    assert keys.conversation_id("open", "s-1") == blake("session", "s-1")
    assert keys.conversation_id("open", None) == "open"
    assert keys.session_of({}, None, "X-Session-ID") is None
    assert keys.session_of({"X-Session-ID": ""}, "u", "X-Session-ID") == "u"
    assert keys.session_of({"X-Session-ID": "h"}, "u", "X-Session-ID") == "h"  # header first


def test_the_zones_are_the_documented_canonical_text() -> None:
    call = [{"id": "c1", "function": {"name": "f", "arguments": "{}"}, "type": "function"}]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"b": 1, "a": 2}}}]
    body = {
        "messages": [
            {"role": "system", "content": "S1"},
            "not a message",
            {"role": "developer", "content": [{"type": "text", "text": "S2"}, {"b": 1, "a": 2}]},
            {"role": "user", "content": None},
            {"role": "assistant", "content": "ok", "tool_calls": call},
            {"content": {"z": 1, "y": [1, 2]}},
            {"role": "system", "content": "late"},
        ],
        "tools": tools,
    }
    assert keys.parse_zones(body) == keys.Zones(
        system='S1\x1fS2{"a":2,"b":1}',
        tools='[{"function":{"name":"f","parameters":{"a":2,"b":1}},"type":"function"}]',
        history=(
            ("user", ""),
            ("assistant", 'ok[{"function":{"arguments":"{}","name":"f"},"id":"c1",'
                          '"type":"function"}]'),
            ("", '{"y":[1,2],"z":1}'),
            ("system", "late"),  # after the history began: history, not the system zone
        ),
    )  # fmt: skip
    assert keys.parse_zones({"messages": []}) == keys.Zones("", "", ())
    assert keys.parse_zones({"prompt": [1, 2, 3]}) == keys.Zones("", "", (("prompt", "1 2 3"),))
    assert keys.parse_zones({"input": "embed me"}) == keys.Zones("", "", (("prompt", "embed me"),))
    assert keys.parse_zones({}) == keys.Zones("", "", (("prompt", ""),))


def test_tool_calls_and_tools_are_part_of_what_is_compared() -> None:
    def assistant(calls: list) -> dict:
        turn = {"role": "assistant", "content": "", "tool_calls": calls}
        return {"messages": [{"role": "user", "content": "q"}, turn]}

    one = [{"function": {"name": "a"}}]
    assert keys.parse_zones(assistant(one)) != keys.parse_zones(assistant([{"function": {}}]))
    no_tools = keys.parse_zones({"messages": [{"role": "user", "content": "q"}]})
    assert no_tools.tools == ""
    assert keys.parse_zones({"messages": [{"role": "user", "content": "q"}], "tools": []}).tools \
        == "[]"  # fmt: skip


def test_the_head_joins_system_tools_and_the_first_turn() -> None:
    zones = keys.Zones("sys", "tools", (("user", "first"), ("assistant", "second")))
    assert keys.head(zones, 100) == "sys\x1ftools\x1fuser:first"
    assert keys.head(zones, 6) == "sys\x1fto"  # six characters


def test_a_new_conversation_is_keyed_by_its_head_and_itself_only_in_prefix_mode() -> None:
    a, b = keys.conversation_key("prefix", "k", "c1"), keys.conversation_key("prefix", "k", "c2")
    assert a not in (b, "k")  # conversations sharing a head get walks of their own
    assert a == keys.conversation_key("prefix", "k", "c1")
    assert a != keys.conversation_key("prefix", "other-head", "c1")  # salts, endpoints apart
    assert keys.conversation_key("session", "k", "c1") == "k"  # the session names it already
    assert keys.conversation_key("endpoint", "k", "c1") == "k"  # one primary pod, as configured
