"""Load, rate and size estimates (router.estimates)."""

from kvpin.router import estimates
from kvpin.router.loads import EngineLoad, parse


def test_queued_work_counts_what_was_sent_until_its_first_token() -> None:
    e = estimates.Estimates()
    e.sent("ep", "a", 3000)
    e.sent("ep", "a", 1000)
    assert e.queued("ep", "a", in_flight=2, engine=None) == 4000
    e.answered("ep", "a", 3000)
    assert e.queued("ep", "a", in_flight=2, engine=None) == 1000 + estimates.DECODE_TOKENS


def test_engine_load_adds_what_other_replicas_sent() -> None:
    e = estimates.Estimates()
    e.sent("ep", "a", 2000)  # mean uncached 2000; one of the engine's 3 waiting is ours
    load = EngineLoad(waiting=3, running=1, at=0, mine=1)
    assert e.queued("ep", "a", 1, load) == 2000 + 2 * 2000 + estimates.DECODE_TOKENS


def test_a_stale_scrape_does_not_count_this_replicas_ended_requests() -> None:
    e = estimates.Estimates()
    # read while two requests of ours ran there; both have ended since: nothing is queued
    assert e.queued("ep", "a", 0, EngineLoad(waiting=0, running=2, at=0, mine=2)) == 0
    # read while one of ours ran beside one of another replica's: that one still counts
    load = EngineLoad(waiting=0, running=2, at=0, mine=1)
    assert e.queued("ep", "a", 0, load) == estimates.DECODE_TOKENS
    # ours sent since the scrape and still waiting are counted once, from what we know
    e.sent("ep", "a", 500)
    assert e.queued("ep", "a", 1, load) == 500 + estimates.DECODE_TOKENS


def test_rates_and_chars_per_token_are_learned_from_usage() -> None:
    e = estimates.Estimates()
    assert e.tokens("ep", 400) == 100
    e.learn("ep", "a", prompt_chars=900, prompt_tokens=100, uncached_tokens=100, ttft_s=1,
            alone=True)  # fmt: skip
    assert e.tokens("ep", 900) == 100  # first sample taken whole
    assert e.rate("ep", "a", 1.0) == 1.0  # too short to say anything about speed
    e.learn("ep", "a", prompt_chars=0, prompt_tokens=5000, uncached_tokens=4000, ttft_s=0.5,
            alone=True)  # fmt: skip
    e.learn(
        "ep", "a", prompt_chars=0, prompt_tokens=5000, uncached_tokens=4000, ttft_s=5, alone=False
    )  # queued behind others: not a rate sample
    assert e.rate("ep", "a", 1.0) == 8000


def test_engine_metrics_are_read_from_vllm_and_sglang_names() -> None:
    vllm = 'vllm:num_requests_waiting{model_name="m"} 2.0\nvllm:num_requests_running{x="y"} 3\n'
    assert parse(vllm, 1.0) == EngineLoad(2.0, 3.0, 1.0)
    assert parse("sglang:num_queue_reqs 4\nsglang:num_running_reqs 1\n", 0) == EngineLoad(4, 1, 0)
    assert parse("other_metric 1\n", 0) is None
