"""Load, rate and size estimates (router.estimates)."""

import math

from kvpin.router import estimates
from kvpin.router.loads import EngineLoad, parse


def test_queued_work_counts_what_was_sent_until_its_first_token() -> None:
    e = estimates.Estimates()
    first = e.sent("ep", "a", 3000)
    e.sent("ep", "a", 1000)
    assert e.queued("ep", "a", in_flight=2, engine=None) == 4000
    e.answered(first)
    assert e.queued("ep", "a", in_flight=2, engine=None) == 1000 + estimates.DECODE_TOKENS


def test_engine_load_adds_what_other_replicas_sent() -> None:
    e = estimates.Estimates()
    e.sent("ep", "a", 2000)  # mean uncached 2000; one of the engine's 3 waiting is ours
    load = EngineLoad(waiting=3, running=1, at=0, mine=1)
    assert e.queued("ep", "a", 1, load) == 2000 + 2 * 2000 + estimates.DECODE_TOKENS


def test_requests_waiting_are_this_replicas_and_those_the_engine_shows_beyond_them() -> None:
    e = estimates.Estimates()
    assert e.waiting_at("ep", "a", None) == 0
    first = e.sent("ep", "a", 2000)
    e.sent("ep", "a", 1000)
    assert e.waiting_at("ep", "a", None) == 2
    # the engine has 5 waiting, 2 of them ours: 3 from other replicas
    assert e.waiting_at("ep", "a", EngineLoad(waiting=5, running=1, at=0, mine=2)) == 5
    # a stale scrape showing only ours (now answered) adds nothing
    e.answered(first)
    assert e.waiting_at("ep", "a", EngineLoad(waiting=2, running=0, at=0, mine=2)) == 1


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


def test_averages_move_a_fifth_of_the_way_to_each_new_observation() -> None:
    assert estimates._average(None, 10.0) == 10.0
    assert estimates._average(10.0, 20.0) == 12.0
    assert estimates._average(10.0, 0.0) == 8.0


def test_a_members_rate_is_its_own_else_its_endpoints_peers_else_the_default() -> None:
    e = estimates.Estimates()
    assert e.rate("ep", "a", 5000.0) == 5000.0
    e.rates[("ep", "a")] = 8000.0
    e.rates[("ep", "b")] = 4000.0
    e.rates[("other", "c")] = 99_000.0
    assert e.rate("ep", "a", 5000.0) == 8000.0
    assert e.rate("ep", "new", 5000.0) == 6000.0  # the mean of its endpoint's peers only
    assert e.rate("third", "x", 5000.0) == 5000.0


def test_rates_are_learned_only_from_long_prefills_that_ran_alone() -> None:
    e = estimates.Estimates()
    e.learn("ep", "a", prompt_chars=0, prompt_tokens=0, uncached_tokens=256, ttft_s=0.1,
            alone=True)  # fmt: skip
    assert e.rates == {("ep", "a"): 2560.0}  # exactly MIN_SAMPLE_TOKENS counts
    e.learn("ep", "b", prompt_chars=0, prompt_tokens=0, uncached_tokens=255, ttft_s=0.1,
            alone=True)  # fmt: skip
    e.learn("ep", "c", prompt_chars=0, prompt_tokens=0, uncached_tokens=5000, ttft_s=0.1,
            alone=False)  # fmt: skip
    e.learn("ep", "d", prompt_chars=0, prompt_tokens=0, uncached_tokens=5000, ttft_s=0.0,
            alone=True)  # fmt: skip
    assert set(e.rates) == {("ep", "a")}
    e.learn("ep", "a", prompt_chars=0, prompt_tokens=0, uncached_tokens=1000, ttft_s=0.1,
            alone=True)  # fmt: skip
    assert e.rates[("ep", "a")] == 2560.0 + 0.2 * (10_000.0 - 2560.0)


def test_the_chars_per_token_ratio_is_learned_per_endpoint() -> None:
    e = estimates.Estimates()
    e.learn("ep", "a", prompt_chars=3000, prompt_tokens=1000, uncached_tokens=0, ttft_s=0,
            alone=False)  # fmt: skip
    e.learn(
        "ep", "a", prompt_chars=500, prompt_tokens=0, uncached_tokens=0, ttft_s=0, alone=False
    )  # fmt: skip  (no tokens reported: nothing learned)
    assert e.chars_per_token == {"ep": 3.0}
    assert e.tokens("ep", 300) == 100 and e.tokens("other", 400) == 100
    e.learn("ep", "a", prompt_chars=5000, prompt_tokens=1000, uncached_tokens=0, ttft_s=0,
            alone=False)  # fmt: skip
    assert e.chars_per_token["ep"] == 3.4


def test_the_mean_uncached_size_prices_other_replicas_waiting_requests() -> None:
    e = estimates.Estimates()
    assert e.queued("ep", "a", 0, EngineLoad(waiting=2, running=0, at=0)) == 2 * 1024.0
    e.sent("ep", "a", 1000)
    e.sent("ep", "b", 2000)
    assert e.mean_uncached == {"ep": 1200.0}


def test_forgetting_members_drops_their_estimates_only() -> None:
    e = estimates.Estimates()
    old = e.sent("ep", "a", 100)
    e.sent("ep", "b", 100)
    e.rates[("ep", "a")] = e.rates[("ep", "b")] = 1.0
    e.forget("ep", ["a"])
    assert ("ep", "a") not in e.pending and ("ep", "a") not in e.rates
    assert e.pending[("ep", "b")] == 100 and e.rates[("ep", "b")] == 1.0
    e.answered(old)  # a request in flight when its member left
    assert ("ep", "a") not in e.pending and ("ep", "a") not in e.waiting


def test_a_request_sent_before_its_member_was_forgotten_takes_nothing_from_those_after() -> None:
    e = estimates.Estimates()
    old = e.sent("ep", "a", 3000)
    e.forget("ep", ["a"])  # it restarted at a new address: its queue is gone
    e.queued("ep", "a", in_flight=1, engine=None)  # placing the next request reads it
    new = e.sent("ep", "a", 1000)
    e.answered(old)  # the old pod's request ends (fails) after the new one was sent
    assert (e.pending[("ep", "a")], e.waiting[("ep", "a")]) == (1000.0, 1)
    e.answered(new)
    assert (e.pending[("ep", "a")], e.waiting[("ep", "a")]) == (0.0, 0)


def test_dropping_an_endpoint_keeps_nothing_of_it() -> None:
    e = estimates.Estimates()
    sent = {ep: e.sent(ep, "a", 100) for ep in ("gone", "kept")}
    for ep in ("gone", "kept"):
        e.learn(ep, "a", prompt_chars=4000, prompt_tokens=1000, uncached_tokens=1000,
                ttft_s=0.1, alone=True)  # fmt: skip
        e.arrivals[ep].add(1.0)
    tables = {name: t for name, t in vars(e).items() if isinstance(t, dict)}
    before = {name: len(table) for name, table in tables.items()}
    e.drop("gone")
    e.answered(sent["gone"])  # its last request ends after it is gone
    for name, table in tables.items():
        assert len(table) == before[name] // 2, name  # every table held one of each
        assert all("gone" not in (k if isinstance(k, tuple) else (k,)) for k in table), name
    assert e.pending[("kept", "a")] == 100 and e.arrivals["kept"].rate(1.0) > 0


def test_engine_metrics_are_summed_over_label_sets_and_engines_of_both_kinds() -> None:
    text = (
        'vllm:num_requests_waiting{model_name="a"} 2\n'
        'vllm:num_requests_waiting{model_name="b"} 1.0\n'
        "vllm:num_requests_running 3\n"
        "sglang:num_queue_reqs 4\n"
        "vllm:num_requests_running NaN\n"
        "vllm:num_requests_running -1\n"
        "other_metric 100\n"
    )
    # NaN and negative samples are ignored: one would turn every cost estimate into NaN
    assert parse(text, at=7.0) == EngineLoad(waiting=7.0, running=3.0, at=7.0)
    only_running = parse("sglang:num_running_reqs 5\n", at=0)
    assert only_running == EngineLoad(waiting=0, running=5.0, at=0)
    assert parse("vllm:num_requests_waiting 1\n", at=0) == EngineLoad(1.0, 0, 0)
    assert parse("unrelated 1\n", at=0) is None


def test_the_cache_size_is_read_from_vllm_and_sglang_metrics() -> None:
    info = 'vllm:cache_config_info{block_size="16",model_name="m",num_gpu_blocks="2000"} 1.0\n'
    assert parse("vllm:num_requests_running 1\n" + info, 0).capacity == 32_000
    sglang = "sglang:num_running_reqs 1\nsglang:max_total_num_tokens 471258\n"
    assert parse(sglang, 0).capacity == 471_258
    for labels in ('block_size="16"', 'block_size="x",num_gpu_blocks="9"', ""):
        text = f"vllm:num_requests_running 1\nvllm:cache_config_info{{{labels}}} 1\n"
        assert parse(text, 0).capacity is None  # a size it cannot read is no size
    nan = "vllm:num_requests_running 1\nsglang:max_total_num_tokens NaN\n"
    assert parse(nan, 0).capacity is None
    after_nan = "vllm:num_requests_waiting NaN\n" + info + "vllm:num_requests_running 2\n"
    assert parse(after_nan, 0) == EngineLoad(0, 2, 0, capacity=32_000)  # one bad line skipped


def test_the_arrival_rate_counts_requests_decayed_over_a_window() -> None:
    window = estimates.ARRIVALS_WINDOW_S
    arrivals = estimates.Arrivals()
    assert arrivals.rate(0.0) == 0.0
    for i in range(10):
        arrivals.add(100.0 + i * 0.01)  # a burst of ten
    assert 9.8 / window < arrivals.rate(100.1) < 10 / window
    # one window later it has decayed by e, and it never rises without arrivals
    later = arrivals.rate(100.09 + window)
    assert abs(later - 10 / window / math.e) < 0.05 / window
    assert arrivals.rate(100.09 + 3 * window) < later
    # kept per endpoint
    e = estimates.Estimates()
    e.arrivals["ep"].add(1.0)
    assert e.arrivals["other"].rate(1.0) == 0.0 and e.arrivals["ep"].rate(1.0) == 1 / window
