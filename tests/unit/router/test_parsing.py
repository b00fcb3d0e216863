"""Where bodies are parsed (router.parsing): inline when cheap, else in a real worker process."""

from __future__ import annotations

import json
import os
import signal

import pytest

from kvpin.router import bodies, parsing
from kvpin.router.config import ParseSettings

BODY = json.dumps({"model": "ep", "messages": [{"role": "user", "content": "hi"}]}).encode()


def test_only_small_sparse_bodies_are_parsed_inline() -> None:
    settings = ParseSettings(workers=1, inline_bytes=100, inline_objects=2)
    assert parsing.is_inline(b"{" + b" " * 98 + b"}", settings)  # 100 bytes: the limit
    assert not parsing.is_inline(b"{" + b" " * 99 + b"}", settings)
    assert parsing.is_inline(b"{{}}", settings)  # two objects: the limit
    assert not parsing.is_inline(b"{{{}}}", settings)
    assert parsing.is_inline(b"{" * 5000, ParseSettings(workers=0))  # no workers: always


async def test_a_large_body_is_summarized_in_a_worker_the_same_as_inline() -> None:
    parser = parsing.Parser(ParseSettings(workers=1, inline_bytes=10))
    parser.start()
    try:
        assert parser._pool is not None
        assert parser._pool._max_workers == 1  # type: ignore[attr-defined]
        # spawn, never fork: a fork would copy the router's watch threads mid-step
        assert parser._pool._mp_context.get_start_method() == "spawn"  # type: ignore[attr-defined]
        assert await parser.summarize(BODY) == bodies.summarize(BODY, bodies.Limits())
        with pytest.raises(bodies.BodyError) as refused:  # refusals keep their message
            await parser.summarize(b'{"messages": [], "padding": "xxxxxxxxxx"}')
        assert str(refused.value) == "`model` is required: the endpoint id, e.g. ep-support"
    finally:
        parser.close()


async def test_a_dead_worker_refuses_its_body_and_the_pool_starts_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    parser = parsing.Parser(ParseSettings(workers=1, inline_bytes=10))
    parser.start()
    try:
        await parser.summarize(BODY)  # the worker process exists now
        assert parser._pool is not None
        for pid in list(parser._pool._processes):  # type: ignore[attr-defined]
            os.kill(pid, signal.SIGKILL)
        with pytest.raises(bodies.BodyError) as refused:
            for _ in range(50):  # until the pool notices its worker is gone
                await parser.summarize(BODY)
        assert str(refused.value) == "the body could not be parsed"
        assert "a parse worker died; restarting the pool" in [
            r.getMessage() for r in caplog.records
        ]
        assert await parser.summarize(BODY) == bodies.summarize(BODY, bodies.Limits())
        # a small body never waits for the pool: parsed here even when the pool is broken
        for pid in list(parser._pool._processes):  # type: ignore[attr-defined]
            os.kill(pid, signal.SIGKILL)
        small = parsing.Parser(ParseSettings(workers=1))
        small._pool = parser._pool
        assert await small.summarize(BODY) == bodies.summarize(BODY, bodies.Limits())
    finally:
        parser.close()


async def test_without_workers_every_body_is_parsed_inline_and_the_log_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    parser = parsing.Parser(ParseSettings(workers=0))
    with caplog.at_level("INFO"):
        parser.start()
    assert parser._pool is None
    assert [r.getMessage() for r in caplog.records] == [
        "parsing every body on the event loop (no parse workers)"
    ]
    assert await parser.summarize(BODY * 1) == bodies.summarize(BODY, bodies.Limits())
    parser.close()  # nothing to close: no error
