"""A deterministic tokenizer and chat template, so prompts become the same tokens everywhere.

Pure. The simulator, the benchmark's infinite-cache bound and the tests all tokenize with this
module, so "two prompts share k blocks" is exact arithmetic.

Tokenizer: the text is split into runs of word characters, single punctuation characters and
runs of whitespace (`\\w+|[^\\w\\s]|\\s+`); each piece is one token whose id is the CRC-32 of its
UTF-8 bytes. Roughly one token per word, like a BPE tokenizer on English, stable across
processes and machines, and fast (the regex and crc32 are C).

Chat template (a ChatML-like layout, as vLLM's templates render it):

    <|im_start|>system\\n{system prompt}\\n
    # Tools\\n{JSON of the tools, keys sorted, no spaces}\\n<|im_end|>\\n     (when tools are given)
    <|im_start|>{role}\\n{content}<|im_end|>\\n                               (every message)
    <|im_start|>assistant\\n                                                   (generation prompt)

Tools go right after the system prompt with sorted keys, the way real chat templates serialize
them: a client that edits its tools or its system prompt changes the prefix, and one that only
appends messages extends it. Special markers are single tokens with fixed ids.

A real tokenizer (a Hugging Face `tokenizer.json`) can replace the word tokenizer; that needs
the optional `tokenizers` package (`pip install 'kvpin[tokenizer]'`).
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

_PIECES = re.compile(r"\w+|[^\w\s]|\s+")
IM_START, IM_END = 1, 2  # special tokens: fixed ids, never produced by the word tokenizer
Tokenize = Callable[[str], list[int]]


def tokenize(text: str) -> list[int]:
    """Text -> token ids with the built-in word tokenizer."""
    return [zlib.crc32(piece.encode()) | 0x100 for piece in _PIECES.findall(text)]


def load_tokenizer(path: str) -> Tokenize:
    """A Hugging Face tokenizer.json as a Tokenize function."""
    try:
        import tokenizers
    except ImportError as err:  # optional dependency
        raise RuntimeError(
            "--tokenizer needs the `tokenizers` package: pip install 'kvpin[tokenizer]'"
        ) from err
    tokenizer = tokenizers.Tokenizer.from_file(path)

    def encode(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False).ids)

    return encode


def content_text(content: Any) -> str:
    """A message's content as text: a string, or the text parts of a content list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, Mapping))
    raise TypeError("content must be a string or a list of content parts")


def render_chat(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Any] | None = None,
    *,
    encode: Tokenize = tokenize,
) -> list[int]:
    """Chat messages (and tools) -> prompt tokens, generation prompt included."""
    out: list[int] = []
    start = 0
    if messages and messages[0].get("role") in ("system", "developer"):
        out += [IM_START, *encode("system\n" + content_text(messages[0].get("content")))]
        start = 1
    elif tools:
        out += [IM_START, *encode("system\n")]
    if tools:
        out += encode("\n# Tools\n" + json.dumps(tools, sort_keys=True, separators=(",", ":")))
    if start or tools:
        out += [IM_END, *encode("\n")]
    for message in messages[start:]:
        text = content_text(message.get("content"))
        if message.get("tool_calls"):
            text += json.dumps(message["tool_calls"], sort_keys=True, separators=(",", ":"))
        out += [IM_START, *encode(f"{message.get('role', 'user')}\n{text}"), IM_END]
        out += encode("\n")
    out += [IM_START, *encode("assistant\n")]
    return out
