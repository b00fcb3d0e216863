import json

import pytest

from kvpin.router import usage


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 64}}, (100, 64)),
        (
            {"prompt_tokens": 100, "prompt_cache_hit_tokens": 32, "prompt_cache_miss_tokens": 68},
            (100, 32),
        ),
        ({"input_tokens": 50, "input_tokens_details": {"cached_tokens": 16}}, (50, 16)),
        ({"prompt_tokens": 10, "prompt_tokens_details": None}, (10, 0)),
        ({"prompt_tokens": 10}, (10, 0)),
    ],
)
def test_every_usage_shape_normalizes(raw, expected) -> None:
    assert usage.normalize(raw) == usage.Usage(*expected)


@pytest.mark.parametrize("raw", [None, "x", {}, {"prompt_tokens": "9"}])
def test_no_usage(raw) -> None:
    assert usage.normalize(raw) is None


def sse(*events: dict) -> bytes:
    return (
        b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    )


def test_event_streams_are_read_across_chunk_boundaries() -> None:
    stream = sse(
        {"choices": [{"delta": {"content": "hi"}}]},
        {
            "choices": [],
            "usage": {"prompt_tokens": 40, "prompt_tokens_details": {"cached_tokens": 32}},
        },
    )
    for size in (1, 7, 4096):
        reader = usage.UsageReader(event_stream=True)
        for i in range(0, len(stream), size):
            reader.feed(stream[i : i + size])
        assert reader.result() == usage.Usage(40, 32)


def test_json_bodies_are_read_whole_up_to_a_limit() -> None:
    body = json.dumps(
        {"choices": [], "usage": {"prompt_tokens": 7, "prompt_cache_hit_tokens": 0}}
    ).encode()
    reader = usage.UsageReader(event_stream=False)
    reader.feed(body[:5])
    reader.feed(body[5:])
    assert reader.result() == usage.Usage(7, 0)
    small = usage.UsageReader(event_stream=False, limit=10)
    small.feed(body)
    assert small.result() is None


def test_garbage_is_not_usage() -> None:
    reader = usage.UsageReader(event_stream=True)
    reader.feed(b'data: {"usage": nope\n\ndata: [DONE]\n\n')
    assert reader.result() is None
    assert usage.UsageReader(event_stream=False).result() is None


def test_a_json_answer_at_the_limit_is_read_and_one_byte_over_is_not() -> None:
    body = json.dumps({"usage": {"prompt_tokens": 5}}).encode()
    exact = usage.UsageReader(event_stream=False, limit=len(body))
    exact.feed(body[:10])
    exact.feed(body[10:])
    assert exact.result() == usage.Usage(5, 0)
    over = usage.UsageReader(event_stream=False, limit=len(body) - 1)
    over.feed(body[:10])
    over.feed(body[10:])
    over.feed(b"")  # nothing more is kept after an overflow
    assert over.result() is None
    assert usage.UsageReader(event_stream=False).result() is None  # nothing fed
    listed = usage.UsageReader(event_stream=False)
    listed.feed(b"[1, 2]")
    assert listed.result() is None


def test_an_event_streams_last_line_is_read_even_without_a_newline() -> None:
    reader = usage.UsageReader(event_stream=True)
    reader.feed(b'data: {"choices": []}\n\ndata:{"usage": {"prompt_tokens": 9}}')
    assert reader.result() == usage.Usage(9, 0)
    spaced = usage.UsageReader(event_stream=True)  # `data:` with or without the space
    spaced.feed(b'data: {"usage": {"prompt_tokens": 4, "prompt_tokens_details": '
                b'{"cached_tokens": 2}}}\n')  # fmt: skip
    spaced.feed(b'data: {"usage": null}\n')  # a later event without usage keeps the earlier
    spaced.feed(b'event: x\n{"usage": {"prompt_tokens": 1}}\n')  # not a data line
    spaced.feed(b"data: [DONE]\n")
    assert spaced.result() == usage.Usage(4, 2)
