"""Request traces in the public Mooncake format, rendered into chat requests.

Pure. A trace is one JSON object per line: `timestamp` (ms from the start), `input_length` and
`output_length` (tokens) and `hash_ids`, one id per 512-token block of the prompt; equal ids
mean an identical prefix block. Each block id is rendered into the same 512 tokens of text every
time (256 words and 256 spaces for the simulator's tokenizer: `kvpin.sim.tokens`), so two
requests whose ids start alike share exactly that many blocks of prompt, and the last block is
cut to make `input_length` tokens. Every request is one user message: the shared prefix is
where the trace says it is, nothing else is shared.

`synthetic` makes small traces of the same shape for tests and quick runs (conversations whose
turns extend their predecessors, arriving in bursts or smoothly).
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Iterable, Sequence
from typing import Any

BLOCK_TOKENS = 512


class TraceError(ValueError):
    """A trace line that cannot be used; the message names the line."""


@dataclasses.dataclass(frozen=True)
class TraceRequest:
    """One request of a trace."""

    at_s: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def parse(lines: Iterable[str], *, limit: int | None = None) -> list[TraceRequest]:
    """Trace lines -> requests, in arrival order."""
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            request = TraceRequest(
                at_s=float(row["timestamp"]) / 1000,
                input_length=int(row["input_length"]),
                output_length=int(row["output_length"]),
                hash_ids=tuple(int(h) for h in row["hash_ids"]),
            )
        except (ValueError, KeyError, TypeError) as err:
            raise TraceError(f"line {number}: {err}") from None
        if request.input_length < 1 or not request.hash_ids:
            raise TraceError(f"line {number}: an empty prompt")
        if request.input_length > len(request.hash_ids) * BLOCK_TOKENS:
            raise TraceError(f"line {number}: more tokens than its blocks hold")
        out.append(request)
        if limit is not None and len(out) >= limit:
            break
    return sorted(out, key=lambda r: r.at_s)


def window(requests: Sequence[TraceRequest], start: int) -> list[TraceRequest]:
    """The requests from the `start`-th on, their times shifted to begin at 0 (a later stretch
    of a trace, where conversations begun earlier come back, shares more than its opening)."""
    kept = list(requests[start:])
    origin = kept[0].at_s if kept else 0.0
    return [dataclasses.replace(r, at_s=r.at_s - origin) for r in kept]


def block_text(hash_id: int) -> str:
    """The 512 tokens of one block: 256 distinct words, each followed by a space."""
    return "".join(f"b{hash_id}w{j} " for j in range(BLOCK_TOKENS // 2))


def prompt_text(request: TraceRequest) -> str:
    """The prompt of a request: its blocks, the last one cut to make `input_length` tokens."""
    full, rest = divmod(request.input_length, BLOCK_TOKENS)
    text = "".join(block_text(h) for h in request.hash_ids[:full])
    if rest:
        words = block_text(request.hash_ids[full]).split(" ")
        text += " ".join(words[: (rest + 1) // 2])  # word, space, word, ...: rest tokens
        if rest % 2 == 0:
            text += " "
    return text


def build_body(endpoint: str, request: TraceRequest) -> dict[str, Any]:
    """The chat request for one trace request (streamed, with usage)."""
    return {
        "model": endpoint,
        "messages": [{"role": "user", "content": prompt_text(request)}],
        "max_tokens": max(1, request.output_length),
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def synthetic(
    *,
    conversations: int = 40,
    turns: int = 4,
    first_blocks: Sequence[int] = (2, 12),
    shared_blocks: int = 2,
    groups: int = 4,
    growth_blocks: Sequence[int] = (1, 4),
    duration_s: float = 60.0,
    burst: bool = False,
    seed: int = 1,
) -> list[TraceRequest]:
    """A small trace of multi-turn conversations in the Mooncake format.

    Each conversation opens with one of `groups` shared heads (`shared_blocks` blocks, a system
    prompt) and its own blocks, and each turn appends `growth_blocks` more. Conversations start
    at random times over `duration_s`; with `burst`, they start in a few bursts instead.
    """
    rng = random.Random(seed)
    next_id = groups * shared_blocks
    requests = []
    bursts = [rng.uniform(0, duration_s * 0.8) for _ in range(max(1, conversations // 10))]
    for _ in range(conversations):
        group = rng.randrange(groups)
        ids = list(range(group * shared_blocks, (group + 1) * shared_blocks))
        own = rng.randint(*first_blocks)
        ids += range(next_id, next_id + own)
        next_id += own
        at = rng.choice(bursts) + rng.uniform(0, 0.2) if burst else rng.uniform(0, duration_s * 0.8)
        for _ in range(turns):
            tokens = len(ids) * BLOCK_TOKENS - rng.randrange(BLOCK_TOKENS)
            requests.append(TraceRequest(at, tokens, rng.randint(4, 64), tuple(ids)))
            grow = rng.randint(*growth_blocks)
            ids += range(next_id, next_id + grow)
            next_id += grow
            at += rng.uniform(1.0, duration_s / turns)
    return sorted(requests, key=lambda r: r.at_s)


def dumps(requests: Iterable[TraceRequest]) -> str:
    """Requests as trace lines."""
    return "".join(
        json.dumps({"timestamp": round(r.at_s * 1000), "input_length": r.input_length,
                    "output_length": r.output_length, "hash_ids": list(r.hash_ids)}) + "\n"
        for r in requests
    )  # fmt: skip
