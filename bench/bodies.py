"""Request bodies the benchmarks send."""

from __future__ import annotations

from typing import Any


def small_chat(model: str) -> dict[str, Any]:
    """A small chat request: two short messages, four tokens out."""
    return {
        "model": model,
        "max_tokens": 4,
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is the capital of France?"},
        ],
    }
