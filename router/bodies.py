"""A request body -> what the router needs of it, validated.

Pure. The router reads only a little of a body (the endpoint id, the zones that make the keys,
the session and cache salt), but it must not forward a body an engine would choke on in a way
that looks like the engine's fault, so `summarize` checks the shapes it reads: the body is a
JSON object (orjson: lone surrogates, non-finite and out-of-range numbers are refused while
parsing), `messages` is a list of objects with a string `role` and a `content` that is a string,
a list of parts or absent, nesting is bounded, and so are message and part counts. Every
refusal is a BodyError whose message names the field, never its contents.

The result, a Summary, is small and fixed in shape whatever the prompt size (digests, a head cut
at keys.HEAD_CHARS, the rolling history hashes of the break detector), so it can be computed in
another process for bodies that would block the event loop (see kvpin.router.parsing) and sent
back cheaply. The body itself is forwarded as it came; only `with_field` edits it, by appending a
member to the top-level object, so nothing else of the client's bytes changes.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Mapping
from typing import Any

import orjson

from kvpin.router import breaks, holdings, keys, warmup


class BodyError(ValueError):
    """The body cannot be routed; the message says why (and is safe to return to the client)."""


class TooLargeError(BodyError):
    """The body, once decoded, is larger than allowed."""


_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def decode(raw: bytes, encoding: str, limit: int) -> bytes:
    """The body under its `Content-Encoding`, never more than `limit` bytes (a gzip bomb
    stops there). The router's server does not decode bodies itself (its errors would end the
    connection instead of answering), so this is the only place that does."""
    if encoding in ("", "identity"):
        return raw
    wbits = _WBITS.get(encoding)
    if wbits is None:
        raise BodyError(f"Content-Encoding {encoding[:32]!r} is not supported (gzip, deflate)")
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(raw, limit + 1)
    except zlib.error:
        raise BodyError(f"the body is not valid {encoding}") from None
    if len(out) > limit:
        raise TooLargeError(f"the body is larger than {limit} bytes")
    if not inflater.eof:
        raise BodyError(f"the body is not valid {encoding}: it ends early")
    return out


@dataclasses.dataclass(frozen=True)
class Limits:
    """What a body may hold. Defaults fit long agent histories and large tool sets."""

    max_messages: int = 10_000
    """Messages in `messages`."""
    max_parts: int = 1_000
    """Content parts in one message."""
    max_depth: int = 64
    """Nesting of arrays and objects anywhere in the body (deep JSON schemas fit)."""


@dataclasses.dataclass(frozen=True)
class Summary:
    """What routing reads of one request."""

    model: str
    user: str | None  # the body's `user`, a session id when no header gives one
    cache_salt: str  # the client's own `cache_salt`, or ""
    head: str  # keys.head(zones, keys.HEAD_CHARS)
    opening: str  # keys.opening(zones)
    turn: breaks.Turn
    prompt_chars: int  # characters of system, tools and history: the prompt's size
    head_chars: int  # holdings.head_chars: where its own text begins after system and tools
    first_chars: int  # holdings.first_turn_chars: the size of the conversation's first turn
    last_chars: int  # characters of the last message: what this turn added
    chunks: bytes  # holdings.chunk_names: the prompt's prefix chunks, named
    messages: int  # history messages (0 or 1: a conversation's first turn)
    shared_head: bytes  # warmup.head_of: leading system messages and tools, to warm new members


def _check_depth(doc: Any, limit: int) -> None:
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            raise BodyError(f"the body is nested deeper than {limit} levels")
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))


def check_messages(messages: Any, limits: Limits) -> None:
    if not isinstance(messages, list):
        raise BodyError("`messages` must be a list of message objects")
    if len(messages) > limits.max_messages:
        raise BodyError(f"`messages` has more than {limits.max_messages} messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise BodyError(f"messages[{i}] must be an object")
        if not isinstance(message.get("role"), str):
            raise BodyError(f"messages[{i}].role must be a string")
        content = message.get("content")
        if isinstance(content, list):
            if len(content) > limits.max_parts:
                raise BodyError(f"messages[{i}].content has more than {limits.max_parts} parts")
            if not all(isinstance(part, dict) for part in content):
                raise BodyError(f"messages[{i}].content parts must be objects")
        elif content is not None and not isinstance(content, str):
            raise BodyError(f"messages[{i}].content must be a string or a list of parts")


def parse(raw: bytes, limits: Limits) -> dict[str, Any]:
    """The body as a JSON object, its shapes checked; BodyError otherwise."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        raise BodyError(f"the body is not valid JSON: {err}") from None
    if not isinstance(body, dict):
        raise BodyError("the body must be a JSON object")
    if raw.count(b"{") + raw.count(b"[") > limits.max_depth:  # else it cannot be too deep
        _check_depth(body, limits.max_depth)
    if "messages" in body:
        check_messages(body["messages"], limits)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BodyError("`model` is required: the endpoint id, e.g. ep-support")
    for name in ("user", "cache_salt"):
        if body.get(name) is not None and not isinstance(body[name], str):
            raise BodyError(f"`{name}` must be a string")
    return body


def summarize_body(body: Mapping[str, Any]) -> Summary:
    """The Summary of a body `parse` accepted."""
    zones = keys.parse_zones(body)
    chunks = holdings.chunk_names(zones)
    turn = breaks.fingerprint(zones, chunks)
    return Summary(
        model=body["model"],
        user=body.get("user") or None,
        cache_salt=body.get("cache_salt") or "",
        head=keys.head(zones, keys.HEAD_CHARS),
        opening=keys.opening(zones),
        turn=turn,
        prompt_chars=turn.chars,
        head_chars=holdings.head_chars(zones),
        first_chars=holdings.first_turn_chars(zones),
        last_chars=len(zones.history[-1][1]) if zones.history else 0,
        chunks=chunks,
        messages=len(zones.history),
        shared_head=warmup.head_of(body),
    )


def summarize(raw: bytes, limits: Limits) -> Summary:
    """Parse, check and summarize a body in one call (what a parsing worker runs)."""
    return summarize_body(parse(raw, limits))


def with_field(raw: bytes, name: str, value: str) -> bytes:
    """`raw` (a JSON object `parse` accepted) with `name` set to `value`.

    The member is appended before the closing brace; JSON parsers keep the last of duplicate
    names (orjson, Python's json, pydantic), so it wins over one the client sent.
    """
    end = raw.rstrip()[:-1]  # the closing brace of the object
    empty = end.rstrip().endswith(b"{")
    member = orjson.dumps(name) + b":" + orjson.dumps(value)
    return end + (member if empty else b"," + member) + b"}"
