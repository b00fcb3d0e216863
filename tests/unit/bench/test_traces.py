"""Mooncake traces rendered into prompts whose shared prefixes are exactly the trace's."""

import pytest

from kvpin.bench import traces
from kvpin.sim import tokens


def request(ids: tuple[int, ...], length: int) -> traces.TraceRequest:
    return traces.TraceRequest(0.0, length, 8, ids)


@pytest.mark.parametrize("length", [1, 2, 511, 512, 513, 1024, 1300])
def test_a_prompt_has_exactly_input_length_tokens(length: int) -> None:
    assert len(tokens.tokenize(traces.prompt_text(request((1, 2, 3), length)))) == length


def test_equal_block_ids_share_exactly_that_prefix() -> None:
    a = tokens.tokenize(traces.prompt_text(request((7, 8, 9), 1536)))
    b = tokens.tokenize(traces.prompt_text(request((7, 8, 4), 1536)))
    shared = next(i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)
    assert shared == 1024


def test_parse_reads_the_public_format_and_refuses_nonsense() -> None:
    line = '{"timestamp": 1500, "input_length": 600, "output_length": 3, "hash_ids": [4, 5]}'
    assert traces.parse([line, ""]) == [traces.TraceRequest(1.5, 600, 3, (4, 5))]
    for bad in ('{"timestamp": 0}', '{"timestamp": 0, "input_length": 2000, '
                '"output_length": 1, "hash_ids": [1]}', "not json"):  # fmt: skip
        with pytest.raises(traces.TraceError, match="line 1"):
            traces.parse([bad])


def test_synthetic_traces_round_trip_and_turns_extend_their_conversation() -> None:
    trace = traces.synthetic(conversations=5, turns=3, seed=4)
    assert traces.parse(traces.dumps(trace).splitlines()) == [
        traces.TraceRequest(round(r.at_s * 1000) / 1000, r.input_length, r.output_length,
                            r.hash_ids) for r in trace
    ]  # fmt: skip
    ids = [r.hash_ids for r in trace]
    extensions = sum(1 for a in ids for b in ids if len(a) < len(b) and b[: len(a)] == a)
    assert extensions >= 5 * 3  # each of a conversation's later turns extends every earlier one
    bursty = traces.synthetic(conversations=30, turns=1, burst=True, seed=4)
    starts = sorted(r.at_s for r in bursty)
    assert starts[-1] - starts[0] > 1 and len({round(s) for s in starts}) < 15


def test_a_window_of_a_trace_starts_at_zero() -> None:
    trace = [traces.TraceRequest(t, 512, 1, (1,)) for t in (1.0, 2.5, 4.0)]
    assert [r.at_s for r in traces.window(trace, 1)] == [0.0, 1.5]
