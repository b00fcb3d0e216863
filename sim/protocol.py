"""The OpenAI wire format of the simulator: request bodies in, response documents out.

Pure. Parsing raises ProtocolError with the HTTP status and an OpenAI-style message; the
server turns it into the error document. Response builders take counts and text, never the
prompt, so nothing here can leak a prompt into a log.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from kvpin.sim import tokens as tokenizing

DEFAULT_MAX_TOKENS = 16
# Filler words of the generated text.
_WORDS = (
    "the",
    "cache",
    "keeps",
    "every",
    "prefix",
    "warm",
    "so",
    "the",
    "next",
    "turn",
    "starts",
    "fast",
    "and",
    "the",
    "pool",
    "stays",
    "balanced",
    "while",
    "each",
    "conversation",
    "returns",
    "to",
    "the",
    "pod",
    "that",
    "already",
    "holds",
    "its",
    "history",
)


class ProtocolError(Exception):
    """A request the simulator refuses, with the status and OpenAI error fields to send."""

    def __init__(
        self, status: int, message: str, *, type: str = "invalid_request_error",
        code: str | None = None, param: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__(message)
        self.status, self.message, self.type, self.code, self.param = (
            status, message, type, code, param,
        )  # fmt: skip

    def to_body(self) -> dict[str, Any]:
        """The error document."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


@dataclasses.dataclass(frozen=True)
class Request:
    """A parsed completion request: just what the engine needs."""

    kind: str  # "chat" or "text"
    model: str
    prompt: list[int]
    max_tokens: int
    stream: bool
    include_usage: bool
    cache_salt: str = ""  # vLLM's: prompts with different salts share no cached block


def parse(
    kind: str,
    body: Any,
    *,
    served: Sequence[str],
    max_model_len: int,
    encode: tokenizing.Tokenize = tokenizing.tokenize,
) -> Request:
    """Validate a /v1/chat/completions or /v1/completions body and tokenize its prompt."""
    if not isinstance(body, Mapping):
        raise ProtocolError(400, "the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ProtocolError(400, "`model` is required and must be a string", param="model")
    if model not in served:
        raise ProtocolError(
            404, f"The model `{model}` does not exist.", type="NotFoundError",
            code="model_not_found", param="model",
        )  # fmt: skip
    try:
        prompt = _chat_prompt(body, encode) if kind == "chat" else _text_prompt(body, encode)
    except TypeError as err:
        raise ProtocolError(400, str(err)) from err
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ProtocolError(400, "`max_tokens` must be a positive integer", param="max_tokens")
    if len(prompt) + max_tokens > max_model_len:
        raise ProtocolError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {len(prompt) + max_tokens} tokens ({len(prompt)} in the messages, "
            f"{max_tokens} in the completion).",
            code="context_length_exceeded",
        )
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ProtocolError(400, "`stream` must be a boolean", param="stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, Mapping):
        raise ProtocolError(400, "`stream_options` must be an object", param="stream_options")
    cache_salt = body.get("cache_salt")
    if cache_salt is not None and (not isinstance(cache_salt, str) or not cache_salt):
        raise ProtocolError(
            400, "Parameter 'cache_salt' must be a non-empty string if provided.",
            param="cache_salt",
        )  # fmt: skip
    return Request(
        kind, model, prompt, max_tokens, stream, bool(options.get("include_usage")),
        cache_salt or "",
    )  # fmt: skip


def _chat_prompt(body: Mapping[str, Any], encode: tokenizing.Tokenize) -> list[int]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ProtocolError(400, "`messages` must be a non-empty list", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise ProtocolError(
                400, f"messages[{i}] must be an object with a string `role`", param="messages"
            )
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise ProtocolError(400, "`tools` must be a list", param="tools")
    return tokenizing.render_chat(messages, tools, encode=encode)


def _text_prompt(body: Mapping[str, Any], encode: tokenizing.Tokenize) -> list[int]:
    prompt = body.get("prompt")
    if isinstance(prompt, str) and prompt:
        return encode(prompt)
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt)
    ):
        return list(prompt)  # already token ids, as the OpenAI API allows
    raise ProtocolError(
        400, "`prompt` must be a non-empty string or a list of token ids "
        "(batched prompts are not supported)", param="prompt",
    )  # fmt: skip


def token_text(prompt_len: int, index: int) -> str:
    """The text of generated token `index`: deterministic filler words."""
    return _WORDS[(prompt_len + index) % len(_WORDS)] + " "


def usage(prompt_tokens: int, completion_tokens: int, cached: int) -> dict[str, Any]:
    """vLLM's usage block plus DeepSeek's cache fields."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached},
        "prompt_cache_hit_tokens": cached,
        "prompt_cache_miss_tokens": prompt_tokens - cached,
    }


@dataclasses.dataclass(frozen=True)
class Ids:
    """The id, creation time, model and pod every document of one response shares."""

    id: str
    created: int
    model: str
    pod: str | None = None
    """Reported as `system_fingerprint` (OpenAI's field naming the backend that answered), so
    a client behind any router can tell which pod served it; omitted when unnamed, as vLLM
    omits it."""

    @classmethod
    def new(cls, kind: str, model: str, pod: str | None = None) -> Ids:
        prefix = "chatcmpl" if kind == "chat" else "cmpl"
        return cls(f"{prefix}-{uuid.uuid4().hex}", int(time.time()), model, pod)

    def header(self, obj: str) -> dict[str, Any]:
        """The fields that open every document of the response."""
        head: dict[str, Any] = {"id": self.id, "object": obj, "created": self.created,
                                "model": self.model}  # fmt: skip
        if self.pod is not None:
            head["system_fingerprint"] = self.pod
        return head


def completion(
    request: Request, ids: Ids, text: str, completion_tokens: int, cached: int
) -> dict[str, Any]:
    """A whole (non-streaming) response."""
    finish = "length"
    if request.kind == "chat":
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": finish,
        }
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}
        obj = "text_completion"
    return {
        **ids.header(obj),
        "choices": [choice],
        "usage": usage(len(request.prompt), completion_tokens, cached),
    }


def chunk(
    request: Request, ids: Ids, text: str | None, *, first: bool = False, finish: str | None = None
) -> dict[str, Any]:
    """One streamed chunk; `text=None` with `finish` set closes the choice."""
    if request.kind == "chat":
        delta: dict[str, Any] = {}
        if first:
            delta["role"] = "assistant"
        if text is not None:
            delta["content"] = text
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}
        obj = "text_completion"
    return {**ids.header(obj), "choices": [choice]}


def usage_chunk(request: Request, ids: Ids, completion_tokens: int, cached: int) -> dict[str, Any]:
    """The last chunk when `stream_options.include_usage` is set: no choices, the usage."""
    obj = "chat.completion.chunk" if request.kind == "chat" else "text_completion"
    return {
        **ids.header(obj),
        "choices": [],
        "usage": usage(len(request.prompt), completion_tokens, cached),
    }
