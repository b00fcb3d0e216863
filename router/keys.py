"""A request -> the short keys the router places it by.

Pure. A request is read once into its three zones, the way an agent's prompt is built:
`system` (system and developer messages), `tools` (the tool schemas, canonical JSON), and the
append-only `history` (every other message, in order). From the zones:

- the **prefix key** hashes the stable head: system, tools and the first turn, cut at
  `prefix_chars` characters. Requests that share that much of their beginning share the key
  (the check of two calls with one long system prompt); a conversation's head never changes,
  so all its turns share it too; with a short system prompt the first user turn is inside the
  head, so different conversations get different keys and spread over the pool.
- the **session key** is a client-given id (a header, by default `X-Session-ID`, or the body's
  `user`), falling back to the prefix key;
- the **endpoint key** is the endpoint id alone: one primary pod, the others on overflow.

The **conversation id** names a conversation across its turns (the session id, else its first
non-system message): the router remembers where a conversation that spilled went, and the
prefix-break detector compares a turn with the one before it.

Keys are 16 hex digits of BLAKE2b, so the ring hashes a short string, whatever the prompt size.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

MODES = ("prefix", "session", "endpoint")
HEAD_CHARS = 65_536  # the most `prefix_chars` can be
OPENING_CHARS = 8192  # of the first message, naming a conversation
_SEP = "\x1f"


@dataclasses.dataclass(frozen=True)
class Zones:
    """The request's prompt, split the way prefix stability is judged."""

    system: str
    tools: str
    history: tuple[tuple[str, str], ...]  # (role, text) of each non-system message


def digest(*parts: str) -> str:
    """A short stable key of the parts."""
    h = hashlib.blake2b(digest_size=8)
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x1f")
    return h.hexdigest()


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping):
                value = part.get("text")
                if value is None:
                    value = json.dumps(part, sort_keys=True, separators=(",", ":"))
                parts.append(str(value))
        return "".join(parts)
    if content is None:
        return ""
    return json.dumps(content, sort_keys=True, separators=(",", ":"))


def parse_zones(body: Mapping[str, Any]) -> Zones:
    """Split a chat (`messages`) or completion (`prompt`) body into zones; never raises."""
    messages = body.get("messages")
    if isinstance(messages, list):
        system, history = [], []
        for message in messages:
            if not isinstance(message, Mapping):
                continue
            role = str(message.get("role", ""))
            text = _text(message.get("content"))
            if message.get("tool_calls"):
                text += json.dumps(message["tool_calls"], sort_keys=True, separators=(",", ":"))
            if role in ("system", "developer") and not history:
                system.append(text)
            else:
                history.append((role, text))
        tools = body.get("tools")
        tools_text = (
            json.dumps(tools, sort_keys=True, separators=(",", ":")) if tools is not None else ""
        )
        return Zones(_SEP.join(system), tools_text, tuple(history))
    prompt = body.get("prompt", body.get("input"))
    if isinstance(prompt, list):
        prompt = " ".join(map(str, prompt))
    return Zones("", "", (("prompt", str(prompt or "")),))


def head(zones: Zones, limit: int) -> str:
    """The stable head: system, tools and the first turn, joined, cut at `limit` characters.

    Later turns never enter it: a conversation's head must not change as its history grows.
    A shorter head is a prefix of a longer one, so one head cut at HEAD_CHARS serves every
    endpoint's `prefix_chars`.
    """
    pieces = (zones.system, zones.tools, *(f"{r}:{t}" for r, t in zones.history[:1]))
    return _SEP.join(piece[:limit] for piece in pieces)[:limit]


def session_of(headers: Mapping[str, str], user: str | None, header: str) -> str | None:
    """The client's session id: the header, else the body's `user`."""
    return headers.get(header) or user or None


def opening(zones: Zones) -> str:
    """A digest of the conversation's first non-system message, its first OPENING_CHARS: the
    same on every turn, also when a client sends a conversation as one growing message."""
    role, text = zones.history[0] if zones.history else ("", "")
    return digest("conversation", role, text[:OPENING_CHARS])


def conversation_id(opening: str, session: str | None) -> str:
    """A name for the conversation that stays the same across its turns.

    Without a session id it is the digest of the first non-system message (`opening`): it
    survives an edited system prompt or tools (so those edits can be noticed), at the price
    that two conversations that open with the same words are taken for one.
    """
    return digest("session", session) if session else opening


def conversation_key(mode: str, key: str, conversation: str) -> str:
    """The key a new conversation is placed by (router.placement): in prefix mode the prefix
    key and the conversation, so conversations sharing a head still spread; otherwise the key,
    which names one conversation (session) or none (endpoint) already."""
    return digest(key, conversation) if mode == "prefix" else key


def routing_key(
    mode: str,
    endpoint_id: str,
    head_text: str,
    session: str | None,
    *,
    prefix_chars: int,
    salt: str = "",
) -> str:
    """The key the ring places the request by.

    A cache salt (a tenant's, or the client's own `cache_salt`) is part of prefix keys: requests
    with different salts can never share cache, so they need not share a member either.
    """
    if mode == "endpoint":
        return digest("endpoint", endpoint_id)
    if mode == "session" and session:
        return digest("session", session)
    return digest("prefix", salt, head_text[:prefix_chars])
