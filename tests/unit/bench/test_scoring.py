import math

import pytest

from kvpin.bench import scoring
from kvpin.sim import tokens


def body(model: str, *contents: str) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": c} for c in contents]}


def test_the_bound_on_a_crafted_trace() -> None:
    text = " ".join(f"w{i}" for i in range(100))  # 199 word and space tokens
    first = body("ep-a", text)
    n = len(tokens.render_chat(first["messages"]))
    longer = body("ep-a", text, "and more words follow here")
    m = len(tokens.render_chat(longer["messages"]))
    # 1: cold. 2: the same prompt again: all whole blocks but the one holding the last token.
    # 3: another endpoint has its own cache: cold. 4: an extension: the first prompt's whole
    # blocks, as far as the shared text reaches.
    hit, total = scoring.infinite_cache_hits([first, first, body("ep-b", text), longer])
    shared_blocks = sum(
        1 for i in range(n // 16)
        if tokens.render_chat(first["messages"])[: (i + 1) * 16]
        == tokens.render_chat(longer["messages"])[: (i + 1) * 16]
    )  # fmt: skip
    assert total == 3 * n + m
    assert hit == (n - 1) // 16 * 16 + shared_blocks * 16
    assert shared_blocks > 0


def test_percentiles_and_spread() -> None:
    assert scoring.percentile([3, 1, 2, 4], 50) == 2
    assert scoring.percentile([3, 1, 2, 4], 99) == 4
    assert math.isnan(scoring.percentile([], 50))
    assert scoring.spread({"a": 10, "b": 10}) == 1.0
    assert scoring.spread({"a": 30, "b": 10}) == pytest.approx(1.5)


def test_summary() -> None:
    records = [
        scoring.Record("ep", 0.0, 0.1, 100, 50, True),
        scoring.Record("ep", 0.0, 0.3, 100, 90, True),
        scoring.Record("ep", 0.0, 0.0, 0, 0, False),
    ]
    s = scoring.summarize("p", records, bound=(160, 200), makespan_s=2.0, per_pod={"a": 1, "b": 1})
    assert (s.requests, s.errors) == (3, 1)
    assert s.hit_rate == pytest.approx(0.7)
    assert s.of_bound == pytest.approx(0.7 / 0.8)
    assert s.throughput_rps == 1.0


def test_runs_of_one_policy_combine_into_means_with_every_error_kept() -> None:
    def run(policy: str, hit: float, errors: int, breaks: int | None = 4) -> scoring.Summary:
        records = [scoring.Record("ep", 0.0, hit, 100, round(100 * hit), True)] + [
            scoring.Record("ep", 0.0, 0.0, 0, 0, False)
        ] * errors
        return scoring.summarize(policy, records, bound=(80, 100), makespan_s=10 * hit,
                                 per_pod={"a": 1}, prefix_breaks=breaks)  # fmt: skip

    a1, b, a2 = run("a", 0.2, 0), run("b", 0.9, 0, None), run("a", 0.4, 3, 7)
    combined = scoring.combine([a1, b, a2])
    assert [s.policy for s in combined] == ["a", "b"]  # the order they first ran in
    a = combined[0]
    assert (a.rounds, a.requests, a.errors) == (2, 1 + 4, 3)  # summed: no error averages away
    assert a.hit_rate == pytest.approx(0.3)
    assert (a.ttft_mean_s, a.makespan_s) == (pytest.approx(0.3), pytest.approx(3.0))
    assert a.prefix_breaks == 6  # (4 + 7) / 2, rounded: still a count
    assert a.prefill_tokens == 70  # (80 + 60) / 2
    assert combined[1] is b  # one run: as it was
    assert scoring.combine([run("b", 0.9, 0, None), b])[0].prefix_breaks is None  # not measured


def test_affinity_tells_requests_that_went_where_their_prefix_was_from_those_that_did_not() -> None:
    text = " ".join(f"w{i}" for i in range(100))
    turn1 = body("ep-a", text)
    turn2 = body("ep-a", text, "a second turn that extends the first")
    other = body("ep-a", "something else entirely " * 20)
    bodies = [turn1, turn2, other, turn2, body("ep-b", text)]
    blocks = (len(tokens.render_chat(turn1["messages"])) - 1) // 16  # what turn 2 shares
    again = (len(tokens.render_chat(turn2["messages"])) - 1) // 16 * 16  # all of turn 2, resent
    record = scoring.Record
    records = [
        record("ep-a", 0.0, 0.1, 0, 0, True, pod="a", request=0),
        record("ep-a", 1.0, 0.1, 0, blocks * 16 // 2, True, pod="a", request=1),  # followed
        record("ep-a", 2.0, 0.1, 0, 0, True, pod="b", request=2),  # new: no prefix
        record("ep-a", 3.0, 0.1, 0, 0, True, pod="b", request=3),  # left: sent elsewhere
        record("ep-b", 4.0, 0.1, 0, 0, True, pod="a", request=4),  # another endpoint: new
        record("ep-a", 5.0, 0.0, 0, 0, False, pod=None, request=3),  # failed: not counted
    ]
    each = scoring.placements(reversed(records), bodies)  # any order: by when they were sent
    assert [(p.record.request, p.prefix_tokens, p.followed) for p in each] == [
        (0, 0, False), (1, blocks * 16, True), (2, 0, False), (3, again, False),
        (4, 0, False), (3, again, False),  # failed: listed, and counted in no figure
    ]  # fmt: skip
    placed = scoring.affinity(each)
    assert placed is not None
    assert placed.prefixed == 2
    assert placed.followed == 0.5
    assert placed.kept == pytest.approx(0.5)  # half the blocks it followed were still there
    summary = scoring.summarize("p", records, bound=(1, 2), makespan_s=1.0, per_pod={"a": 1},
                                placed=placed)  # fmt: skip
    assert (summary.followed, summary.kept) == (0.5, pytest.approx(0.5))


def test_affinity_needs_pods_that_name_themselves() -> None:
    records = [scoring.Record("ep-a", 0.0, 0.1, 10, 0, True, request=0)]
    assert scoring.affinity(scoring.placements(records, [body("ep-a", "hi")])) is None
    summary = scoring.summarize("p", records, bound=(1, 2), makespan_s=1.0, per_pod={"a": 1})
    assert math.isnan(summary.followed) and math.isnan(summary.kept)
