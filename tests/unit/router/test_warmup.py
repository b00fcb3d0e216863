"""What a joining member is warmed with (router.warmup), and its configuration."""

import orjson
import pytest

from kvpin.router import holdings, keys, warmup
from kvpin.router.config import ConfigError, parse_warmup

SYSTEM = {"role": "system", "content": "You are terse."}
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {}}}]


def test_the_head_is_the_leading_system_messages_and_the_tools() -> None:
    body = {"messages": [SYSTEM, {"role": "user", "content": "hi"},
                         {"role": "system", "content": "later"}], "tools": TOOLS}  # fmt: skip
    assert orjson.loads(warmup.head_of(body)) == {"messages": [SYSTEM], "tools": TOOLS}
    assert orjson.loads(warmup.head_of({"messages": [SYSTEM]})) == {"messages": [SYSTEM]}
    assert warmup.head_of({"messages": [{"role": "user", "content": "hi"}]}) == b""
    assert warmup.head_of({"prompt": "completion bodies have no head"}) == b""


def test_a_warmup_request_computes_the_head_and_one_token() -> None:
    head = warmup.head_of({"messages": [SYSTEM], "tools": TOOLS})
    item = warmup.warming("ep-a", head, "tenant-salt")
    body = orjson.loads(item.body)
    assert body["messages"][0] == SYSTEM and body["messages"][-1]["role"] == "user"
    assert (body["tools"], body["max_tokens"], body["model"]) == (TOOLS, 1, "ep-a")
    assert body["cache_salt"] == "tenant-salt"
    assert "cache_salt" not in orjson.loads(warmup.warming("ep-a", head, "").body)
    # what the member holds afterwards is the head's chunks: a prefix of any request with it
    long_system = {"role": "system", "content": "x" * (3 * holdings.CHUNK_CHARS)}
    item = warmup.warming("ep-a", warmup.head_of({"messages": [long_system]}), "")
    request = {"messages": [long_system, {"role": "user", "content": "question"}]}
    full = holdings.chunk_names(keys.parse_zones(request))
    assert item.chunks and full.startswith(item.chunks)


def test_hot_heads_rank_by_use_and_stay_bounded() -> None:
    hot = warmup.HotHeads(capacity=3)
    for head, uses in ((b"a", 1), (b"b", 3), (b"c", 2)):
        for _ in range(uses):
            hot.seen(head, "")
    assert hot.top(2) == [(b"b", ""), (b"c", "")]
    hot.seen(b"a", "salt")  # another salt is another head
    assert len(hot.top(10)) == 3  # the least recently used (a, unsalted) was dropped
    assert (b"a", "") not in hot.top(10)
    hot.seen(b"", "")  # nothing to warm
    hot.seen(b"x" * (warmup.MAX_HEAD_BYTES + 1), "")  # too large to keep
    assert len(hot.top(10)) == 3 and hot.top(1) == [(b"b", "")]


def test_equal_uses_rank_the_most_recent_first() -> None:
    hot = warmup.HotHeads()
    for head in (b"old", b"new"):
        hot.seen(head, "")
    assert hot.top(1) == [(b"new", "")]


def test_members_that_join_or_come_back_elsewhere_are_cold() -> None:
    before = [("pod-0", "10.0.0.1:8000"), ("pod-1", "10.0.0.2:8000"), ("pod-2", "10.0.0.3:8000")]
    after = [("pod-0", "10.0.0.1:8000"), ("pod-1", "10.0.0.9:8000"), ("pod-3", "10.0.0.4:8000")]
    joined, cold = warmup.joined(before, after)
    assert joined == {"pod-1", "pod-3"}  # restarted at a new address, and new
    assert cold == {"pod-1", "pod-2"}  # its cache is gone, and left
    assert warmup.joined([], after)[0] == {"pod-0", "pod-1", "pod-3"}


def test_warmup_configuration_is_checked() -> None:
    config = parse_warmup({"heads": 0, "timeoutSeconds": 5, "concurrency": 1,
                           "prompts": [{"messages": [SYSTEM], "tools": TOOLS}]}, "x")  # fmt: skip
    assert (config.heads, config.timeout_s, config.concurrency) == (0, 5.0, 1)
    assert orjson.loads(config.prompts[0]) == {"messages": [SYSTEM], "tools": TOOLS}
    for bad, words in (
        ({"heads": -1}, "heads must be an integer >= 0"),
        ({"concurrency": 0}, "concurrency must be an integer >= 1"),
        ({"timeoutSeconds": float("inf")}, "timeoutSeconds must be positive"),
        ({"timeoutSeconds": "5s"}, "timeoutSeconds must be a number"),
        ({"prompts": "hi"}, "prompts must be a list"),
        ({"prompts": [{"system": "hi"}]}, "prompts[0] must be a mapping of `messages`"),
        ({"prompts": [{"messages": "hi"}]}, "prompts[0]: `messages` must be a list"),
        ({"prompts": [{"messages": [{"role": "user", "content": "hi"}]}]}, "system messages"),
    ):
        with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace("]", r"\]")):
            parse_warmup(bad, "x")
