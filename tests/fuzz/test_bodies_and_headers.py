"""Property-based fuzzing of the pure request-path pieces: whatever arrives, a body is either
summarized or refused with a BodyError, and headers never carry hop-by-hop fields upstream."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from kvpin.router import bodies, headers

LIMITS = bodies.Limits(max_messages=50, max_parts=5, max_depth=8)
scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool"]) | values},
    optional={"content": values, "tool_calls": values, "name": values},
)
chat_like = st.fixed_dictionaries(
    {"model": st.text(min_size=1) | values},
    optional={"messages": st.lists(message, max_size=8) | values, "tools": values,
              "prompt": values, "user": values, "cache_salt": values},
)  # fmt: skip


def _refused_or_summarized(raw: bytes) -> None:
    try:
        summary = bodies.summarize(raw, LIMITS)
    except bodies.BodyError as err:
        assert str(err)
    else:
        assert isinstance(summary.model, str) and summary.model
        assert len(summary.turn.record()) == 48
        assert summary.messages >= 0


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_are_summarized_or_refused(raw: bytes) -> None:
    _refused_or_summarized(raw)


@settings(max_examples=400, deadline=None)
@given(chat_like)
def test_any_chat_shaped_body_is_summarized_or_refused(body: dict) -> None:
    _refused_or_summarized(json.dumps(body, allow_nan=True).encode("utf-8", "surrogatepass"))


@settings(max_examples=200, deadline=None)
@given(chat_like, st.text(max_size=20))
def test_an_added_field_wins_and_keeps_the_body_valid(body: dict, salt: str) -> None:
    raw = json.dumps(body).encode("utf-8", "surrogatepass")
    try:
        bodies.parse(raw, LIMITS)
    except bodies.BodyError:
        return
    edited = bodies.with_field(raw, "cache_salt", salt)
    assert json.loads(edited) == {**json.loads(raw), "cache_salt": salt}


names = st.text(st.characters(min_codepoint=33, max_codepoint=126, exclude_characters=":"),
                min_size=1, max_size=20)  # fmt: skip
header_sets = st.dictionaries(names, st.text(max_size=30), max_size=12)


@settings(max_examples=300, deadline=None)
@given(header_sets, st.lists(names, max_size=3))
def test_hop_by_hop_headers_never_go_upstream(given_headers: dict, listed: list[str]) -> None:
    given_headers = {**given_headers, "Connection": ", ".join(listed)}
    out = headers.upstream(given_headers, client="10.0.0.1", scheme="http", host="r",
                           strip_auth=True)  # fmt: skip
    lowered = {k.lower() for k in out}
    assert not lowered & headers.HOP_BY_HOP
    assert not lowered & {name.lower() for name in listed} - {
        "accept-encoding",
        "x-forwarded-for",
        "x-forwarded-proto",
        "x-forwarded-host",
    }
    assert "authorization" not in lowered
    assert out["Accept-Encoding"] == "identity"
    assert out["X-Forwarded-For"].endswith("10.0.0.1")
