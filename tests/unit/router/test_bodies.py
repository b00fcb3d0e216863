"""Request bodies (router.bodies): decoding, the shapes checked, the summary, the one edit.
Every refusal is quoted whole: it is what the client reads in the 400."""

from __future__ import annotations

import gzip
import json
import zlib

import orjson
import pytest

from kvpin.router import bodies, holdings, keys
from kvpin.router.bodies import BodyError, Limits

SMALL = Limits(max_messages=3, max_parts=2, max_depth=6)


def refusal(raw: bytes, limits: Limits = SMALL) -> str:
    with pytest.raises(BodyError) as refused:
        bodies.parse(raw, limits)
    return str(refused.value)


def test_bodies_are_decoded_under_their_content_encoding_up_to_the_limit() -> None:
    raw = b'{"model": "ep"}'
    assert bodies.decode(raw, "", 100) == bodies.decode(raw, "identity", 100) == raw
    assert bodies.decode(gzip.compress(raw), "gzip", 100) == raw
    assert bodies.decode(gzip.compress(raw), "x-gzip", 100) == raw
    assert bodies.decode(zlib.compress(raw), "deflate", 100) == raw
    assert bodies.decode(gzip.compress(raw), "gzip", len(raw)) == raw  # exactly the limit


@pytest.mark.parametrize(
    ("raw", "encoding", "limit", "message"),
    [
        (b"{}", "br", 100, "Content-Encoding 'br' is not supported (gzip, deflate)"),
        (b"{}", "x" * 40, 100, f"Content-Encoding {'x' * 32!r} is not supported (gzip, deflate)"),
        (b"not gzip", "gzip", 100, "the body is not valid gzip"),
        (
            gzip.compress(b"{}" * 100)[:20],
            "gzip",
            1000,
            "the body is not valid gzip: it ends early",
        ),
        (gzip.compress(b" " * 101), "gzip", 100, "the body is larger than 100 bytes"),
    ],
)
def test_undecodable_bodies_are_refused_saying_why(
    raw: bytes, encoding: str, limit: int, message: str
) -> None:
    with pytest.raises(BodyError) as refused:
        bodies.decode(raw, encoding, limit)
    assert str(refused.value) == message
    assert isinstance(refused.value, bodies.TooLargeError) == ("larger" in message)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([1], "the body must be a JSON object"),
        ({"messages": []}, "`model` is required: the endpoint id, e.g. ep-support"),
        ({"model": ""}, "`model` is required: the endpoint id, e.g. ep-support"),
        ({"model": "ep", "user": 7}, "`user` must be a string"),
        ({"model": "ep", "cache_salt": ["x"]}, "`cache_salt` must be a string"),
        ({"model": "ep", "messages": {}}, "`messages` must be a list of message objects"),
        ({"model": "ep", "messages": [{"role": "user"}] * 4},
         "`messages` has more than 3 messages"),
        ({"model": "ep", "messages": ["hi"]}, "messages[0] must be an object"),
        ({"model": "ep", "messages": [{"role": "user"}, {"content": "x"}]},
         "messages[1].role must be a string"),
        ({"model": "ep", "messages": [{"role": "user", "content": [{}, {}, {}]}]},
         "messages[0].content has more than 2 parts"),
        ({"model": "ep", "messages": [{"role": "user", "content": [{}, "x"]}]},
         "messages[0].content parts must be objects"),
        ({"model": "ep", "messages": [{"role": "user", "content": 5}]},
         "messages[0].content must be a string or a list of parts"),
        ({"model": "ep", "x": [[[[[[1]]]]]]}, "the body is nested deeper than 6 levels"),
        ({"model": "ep", "x": {"a": {"b": {"c": {"d": {"e": {}}}}}}},
         "the body is nested deeper than 6 levels"),
    ],
)  # fmt: skip
def test_bodies_of_the_wrong_shape_are_refused_saying_which_field(body, message: str) -> None:
    assert refusal(json.dumps(body).encode()) == message


def test_the_limits_themselves_are_accepted() -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "a"}, {}]},
                {"role": "assistant", "content": None}, {"role": "user"}]  # fmt: skip
    assert bodies.parse(json.dumps({"model": "ep", "messages": messages}).encode(), SMALL)
    assert bodies.parse(b'{"model": "ep", "x": [[[[[1]]]]]}', SMALL)  # depth 6: object and 5
    many_brackets = b'{"model": "ep", "a": [], "b": [], "c": {}, "d": {}, "e": [], "f": []}'
    assert bodies.parse(many_brackets, SMALL)  # more brackets than the depth, none deep
    assert refusal(b"{not json").startswith("the body is not valid JSON: ")


def test_the_summary_holds_what_routing_reads() -> None:
    body = {"model": "ep", "user": "u-1", "cache_salt": "s",
            "messages": [{"role": "system", "content": "Be brief."},
                         {"role": "user", "content": "What is 2+2?"},
                         {"role": "assistant", "content": "4"},
                         {"role": "user", "content": "And 3+3?"}],
            "tools": [{"type": "function", "function": {"name": "f"}}]}  # fmt: skip
    summary = bodies.summarize(json.dumps(body).encode(), Limits())
    zones = keys.parse_zones(body)
    assert (summary.model, summary.user, summary.cache_salt) == ("ep", "u-1", "s")
    assert summary.head == keys.head(zones, keys.HEAD_CHARS)
    assert summary.opening == keys.opening(zones)
    tools_chars = len(json.dumps(body["tools"], separators=(",", ":")))
    assert summary.prompt_chars == len("Be brief.") + tools_chars + len("What is 2+2?4And 3+3?")
    assert summary.last_chars == len("And 3+3?")
    assert summary.head_chars == len("Be brief.") + tools_chars + 2 + len("user") + 1
    assert summary.first_chars == summary.head_chars + len("What is 2+2?")
    assert summary.messages == 3
    assert summary.chunks == holdings.chunk_names(zones)
    assert summary.shared_head != b""
    bare = bodies.summarize(b'{"model": "ep", "messages": []}', Limits())
    assert (bare.user, bare.cache_salt, bare.last_chars, bare.messages) == (None, "", 0, 0)
    assert bare.head_chars == 0
    assert bodies.summarize(b'{"model": "ep", "user": ""}', Limits()).user is None


@pytest.mark.parametrize(
    "raw",
    [b'{"model": "ep"}', b'{"model": "ep"}  \n', b"{}", b"{ }\n", b'{"model":"ep","x":{}}'],
)
def test_a_field_is_appended_and_wins_over_one_the_client_sent(raw: bytes) -> None:
    edited = bodies.with_field(raw, "cache_salt", "tenant")
    assert orjson.loads(edited) == {**orjson.loads(raw), "cache_salt": "tenant"}
    assert edited.startswith(raw.rstrip()[:-1])  # the client's bytes up to the brace, untouched
    again = bodies.with_field(b'{"model": "ep", "cache_salt": "mine"}', "cache_salt", "tenant")
    assert orjson.loads(again)["cache_salt"] == "tenant"
