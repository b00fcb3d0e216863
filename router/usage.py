"""Prompt and cached-prompt tokens, read from responses as they stream past.

Pure. The proxy feeds every chunk it forwards to a UsageReader (a copy is read; what the client
receives is untouched). Server-sent events are read line by line and only `data:` lines that
mention "usage" are decoded, so a long stream costs almost nothing; a JSON body is kept up to a
limit and decoded at the end.

Engines report cached tokens three ways; all become one figure:
`usage.prompt_tokens_details.cached_tokens` (OpenAI, vLLM), `usage.prompt_cache_hit_tokens`
(DeepSeek, SGLang's cache report) and `usage.input_tokens_details.cached_tokens` (Responses API).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import orjson

JSON_LIMIT = 4 * 2**20  # responses larger than this are forwarded but not read for usage


@dataclasses.dataclass(frozen=True)
class Usage:
    """Token counts of one response."""

    prompt_tokens: int
    cached_tokens: int


def normalize(usage: Any) -> Usage | None:
    """One Usage from any of the engines' usage shapes; None if there is none."""
    if not isinstance(usage, Mapping):
        return None
    prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
    if not isinstance(prompt, int):
        return None
    cached: Any = None
    for details in ("prompt_tokens_details", "input_tokens_details"):
        block = usage.get(details)
        if isinstance(block, Mapping) and isinstance(block.get("cached_tokens"), int):
            cached = block["cached_tokens"]
            break
    if cached is None and isinstance(usage.get("prompt_cache_hit_tokens"), int):
        cached = usage["prompt_cache_hit_tokens"]
    return Usage(prompt, cached or 0)


class UsageReader:
    """Finds the usage in a response fed to it chunk by chunk."""

    def __init__(self, *, event_stream: bool, limit: int = JSON_LIMIT) -> None:
        self.event_stream = event_stream
        self.limit = limit
        self._buffer = bytearray()
        self._usage: Usage | None = None
        self._overflow = False

    def feed(self, chunk: bytes) -> None:
        """Read one more piece of the response."""
        if self.event_stream:
            self._buffer += chunk
            *lines, rest = self._buffer.split(b"\n")
            self._buffer = bytearray(rest)
            for line in lines:
                self._line(line)
        elif not self._overflow:
            if len(self._buffer) + len(chunk) > self.limit:
                self._overflow = True
                self._buffer.clear()
            else:
                self._buffer += chunk

    def _line(self, line: bytes) -> None:
        if line.startswith(b"data:") and b'"usage"' in line:
            try:
                event = orjson.loads(line[5:])
            except ValueError:
                return
            if isinstance(event, Mapping):
                self._usage = normalize(event.get("usage")) or self._usage

    def result(self) -> Usage | None:
        """The usage, once the whole response has been fed."""
        if self.event_stream:
            if self._buffer:
                self._line(bytes(self._buffer))
                self._buffer.clear()
            return self._usage
        if self._overflow or not self._buffer:
            return None
        try:
            body = orjson.loads(self._buffer)
        except ValueError:
            return None
        return normalize(body.get("usage")) if isinstance(body, Mapping) else None
