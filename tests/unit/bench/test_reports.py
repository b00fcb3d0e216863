"""The benchmarks' reports: tables that print what was measured, and the in-process figures."""

from __future__ import annotations

import json

from kvpin.bench import report, router_throughput, sim_throughput, wrk
from kvpin.bench.scoring import Summary


def summary(policy: str, **fields: object) -> Summary:
    base: dict[str, object] = {
        "requests": 100, "errors": 0, "hit_rate": 0.5, "bound": 0.8, "ttft_p50_s": 0.012,
        "ttft_p99_s": 0.2504, "ttft_mean_s": 0.03, "makespan_s": 12.345, "throughput_rps": 8.1,
        "spread": 1.25, "prefill_tokens": 123456,
    }  # fmt: skip
    return Summary(policy, **{**base, **fields})  # type: ignore[arg-type]


def test_the_policy_table_has_one_row_per_policy_with_every_figure() -> None:
    table = report.markdown(
        [summary("kvpin", prefix_breaks=3, left_home=7, followed=0.875, kept=0.6),
         summary("random", bound=0.0)]
    )  # fmt: skip
    header, rule, kvpin, random = table.splitlines()
    assert header.count("|") == rule.count("|") == kvpin.count("|") == random.count("|")
    cells = [c.strip() for c in kvpin.strip("|").split("|")]
    assert cells == ["kvpin", "50.0%", "80.0%", "62.5%", "12.0", "250.4", "30.0", "123,456",
                     "12.35", "8.1", "1.25", "3", "7", "87.5%", "60.0%", "0"]  # fmt: skip
    assert "| random | 50.0% | 0.0% | — |" in random  # no bound: no share of it
    cells = [c.strip() for c in random.strip("|").split("|")]
    assert cells[-5:-1] == ["—"] * 4  # breaks, left home, followed, kept: not measured


def test_json_rows_carry_the_share_of_the_bound_and_no_nan() -> None:
    rows = json.loads(report.to_json([summary("kvpin"), summary("oracle", bound=0.0)]))
    assert rows[0]["of_bound"] == 0.625
    assert rows[1]["of_bound"] is None  # NaN is not JSON
    assert rows[0]["ttft_p90_s"] is None  # not measured: NaN, written as null


def result(rps: float, p50_ms: float, p99_ms: float, errors: int = 0) -> wrk.Result:
    return wrk.Result(int(rps * 10), rps, {50: p50_ms / 1e3, 99: p99_ms / 1e3}, errors)


def test_the_router_report_shows_added_latency_against_going_direct() -> None:
    rows = [
        router_throughput.Row("direct to one sim", result(5000, 1, 2), result(900, 1.0, 2.0)),
        router_throughput.Row("kvpin router", result(3000, 2, 4), result(600, 1.5, 3.0, 2)),
    ]
    figures = router_throughput.Figures(25e-6, 180.0, {"chat": 9.5}, 96.0)
    text = router_throughput.format_report(rows, figures, router_throughput.RouterBenchConfig())
    lines = text.splitlines()
    assert lines[2] == "| direct to one sim | 5,000 | 1.00 | 2.00 | — | 0 |"
    assert lines[3] == "| kvpin router | 3,000 | 1.50 | 3.00 | 0.50 | 2 |"
    assert "25 µs" in text and "180 bytes per conversation" in text and "chat 9.5 ms/MiB" in text
    assert "`kvpin bench router --duration 10 --connections 32`" in text


def test_the_sim_table_names_the_command_that_made_it() -> None:
    config = sim_throughput.SimBenchConfig(duration_s=3, connections=8)
    text = sim_throughput.format_table([(False, result(4000, 2, 5)), (True, result(3500, 2.5,
                                        6, errors=1))], config)  # fmt: skip
    assert "| chat, 4 tokens | 4,000 | 2.00 | 5.00 | 0 |" in text
    assert "| chat, 4 tokens, streamed | 3,500 | 2.50 | 6.00 | 1 |" in text
    assert "`kvpin bench sim --duration 3 --connections 8`" in text


def test_the_request_path_figures_are_measured_and_plausible() -> None:
    decision = router_throughput.decision_cost(prompt_bytes=4096, members=4)
    assert 0 < decision < 0.05  # seconds for one decision; far below any engine's latency
    per_conversation = router_throughput.conversation_bytes(conversations=500)
    assert 0 < per_conversation < 4096  # a fixed size per conversation, not its length
    per_chunk = router_throughput.holdings_bytes(prompts=200)
    assert 0 < per_chunk < 2048


def test_the_noise_table_gives_the_range_of_each_policy_run_more_than_once() -> None:
    runs = [summary("kvpin", hit_rate=0.052), summary("sglang", hit_rate=0.07),
            summary("kvpin", hit_rate=0.039, ttft_p99_s=0.5),
            summary("kvpin", hit_rate=0.059)]  # fmt: skip
    header, rule, *rows = report.noise(runs).splitlines()
    assert header.count("|") == rule.count("|") == rows[0].count("|")
    assert len(rows) == 1  # sglang ran once: no range to give
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[:4] == ["kvpin", "3", "3.9% to 5.9%", "250.4 to 500.0"]


def test_over_seeds_each_policy_has_its_means_range_and_the_seeds_it_led_on() -> None:
    per_seed = {
        1: [summary("kvpin", hit_rate=0.50, ttft_mean_s=0.10, ttft_p99_s=0.4),
            summary("peer", hit_rate=0.40, ttft_mean_s=0.12, ttft_p99_s=0.3)],
        2: [summary("kvpin", hit_rate=0.30, ttft_mean_s=0.20, ttft_p99_s=0.5, errors=1),
            summary("peer", hit_rate=0.34, ttft_mean_s=0.20, ttft_p99_s=0.6)],
    }  # fmt: skip
    header, rule, kvpin, peer = report.across_seeds(per_seed).splitlines()
    assert header.count("|") == rule.count("|") == kvpin.count("|") == peer.count("|")
    cells = [c.strip() for c in kvpin.strip("|").split("|")]
    assert cells == ["kvpin", "2", "40.0%", "30.0% to 50.0%", "1", "150.0", "2", "450.0", "1", "1"]
    cells = [c.strip() for c in peer.strip("|").split("|")]
    assert cells == ["peer", "2", "37.0%", "34.0% to 40.0%", "1", "160.0", "1", "450.0", "1", "0"]
