"""`kvpin bench workload` and `kvpin bench trace` as users run them, tiny: every policy replays
the same requests, nothing fails, and no policy beats the infinite-cache bound."""

from __future__ import annotations

import collections
import json
import pathlib
import subprocess
import sys

import pytest

from kvpin.bench import traces

KVPIN = pathlib.Path(sys.executable).parent / "kvpin"
POLICIES = "kvpin,round-robin,oracle"


def bench(*args: str) -> str:
    done = subprocess.run([str(KVPIN), "bench", *args], capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    return done.stdout


def check(rows: list[dict], requests: int) -> None:
    assert [r["policy"] for r in rows] == POLICIES.split(",")
    bounds = {round(r["bound"], 9) for r in rows}
    assert len(bounds) == 1  # one workload, whatever the policy
    for r in rows:
        assert (r["requests"], r["errors"]) == (requests, 0), r["policy"]
        assert 0 < r["hit_rate"] <= r["bound"] + 1e-9, r["policy"]
        assert r["prefill_tokens"] > 0
        measured = r["policy"] == "kvpin"  # read off the kvpin router's metrics
        assert (r["left_home"] is not None) == measured, r["policy"]
        assert (r["prefix_breaks"] is not None) == measured, r["policy"]
        assert 0 <= r["followed"] <= 1 and 0 <= r["kept"] <= 1, r["policy"]  # pods named


def test_the_workload_bench_replays_the_same_turns_through_every_policy(
    tmp_path: pathlib.Path,
) -> None:
    out = tmp_path / "w.json"
    table = bench("workload", "--variant", "agents", "--conversations", "6", "--turns", "3",
                  "--agents", "2", "--system-words", "100", "--pods", "2", "--time-scale",
                  "0.02", "--policies", POLICIES, "--json", str(out))  # fmt: skip
    check(json.loads(out.read_text()), requests=18)
    assert table.count("\n| ") >= 3


@pytest.mark.parametrize("burst", [False, True])
def test_the_trace_bench_replays_a_trace_file_open_loop(
    tmp_path: pathlib.Path, burst: bool
) -> None:
    trace = tmp_path / "trace.jsonl"
    requests = traces.synthetic(conversations=5, turns=3, duration_s=2.0, burst=burst, seed=5)
    trace.write_text(traces.dumps(requests))
    out = tmp_path / "t.json"
    bench("trace", "--trace", str(trace), "--speed", "4", "--pods", "2", "--time-scale", "0.02",
          "--policies", POLICIES, "--json", str(out))  # fmt: skip
    check(json.loads(out.read_text()), requests=len(requests))


def test_a_repeated_bench_reports_each_policys_mean_and_range(tmp_path: pathlib.Path) -> None:
    trace = tmp_path / "trace.jsonl"
    requests = traces.synthetic(conversations=4, turns=2, duration_s=1.0, seed=3)
    trace.write_text(traces.dumps(requests))
    out, each = tmp_path / "t.json", tmp_path / "requests.jsonl"
    table = bench("trace", "--trace", str(trace), "--speed", "4", "--pods", "2", "--time-scale",
                  "0.02", "--policies", POLICIES, "--repeat", "2", "--json", str(out),
                  "--records", str(each))  # fmt: skip
    rows = json.loads(out.read_text())
    check(rows, requests=2 * len(requests))  # one row per policy, both runs' requests
    assert {r["rounds"] for r in rows} == {2}
    # every request of every run, request by request: the table's hit rate is theirs
    records = [json.loads(line) for line in each.read_text().splitlines()]
    for row in rows:
        runs = [[r for r in records if (r["policy"], r["round"]) == (row["policy"], n)]
                for n in (1, 2)]  # fmt: skip
        assert [sorted(r["request"] for r in run) for run in runs] == [
            list(range(len(requests)))
        ] * 2
        rates = [sum(r["cached_tokens"] for r in run) / sum(r["prompt_tokens"] for r in run)
                 for run in runs]  # fmt: skip
        assert row["hit_rate"] == pytest.approx(sum(rates) / 2), row["policy"]
        assert all(r["cached_tokens"] <= r["prefix_tokens"] + 16 for run in runs for r in run)
    words = {v for r in records for v in r.values() if isinstance(v, str)}
    assert max(map(len, words)) < 40  # names (policy, endpoint, pod), never a prompt
    noise = table[table.index("lowest to highest") :]
    assert all(f"| {policy} | 2 | " in noise for policy in POLICIES.split(","))


def test_a_bench_over_seeds_reports_each_seed_and_each_policy_over_them(
    tmp_path: pathlib.Path,
) -> None:
    out = tmp_path / "w.json"
    table = bench("workload", "--variant", "agents", "--conversations", "4", "--turns", "2",
                  "--agents", "2", "--system-words", "100", "--pods", "2", "--time-scale",
                  "0.02", "--policies", POLICIES, "--seeds", "1-2", "--json", str(out),
                  "--chart", str(tmp_path / "means.png"),
                  "--records", str(tmp_path / "requests.jsonl"))  # fmt: skip
    rows = json.loads(out.read_text())
    records = (tmp_path / "requests.jsonl").read_text().splitlines()
    labels = collections.Counter((r["seed"], r["policy"]) for r in map(json.loads, records))
    assert labels == {(seed, p): 8 for seed in (1, 2) for p in POLICIES.split(",")}
    assert [r["seed"] for r in rows] == [1] * 3 + [2] * 3
    for seed in (1, 2):
        check([r for r in rows if r["seed"] == seed], requests=8)
    assert "### seed 1" in table and "### seed 2" in table
    over = table[table.index("### over seeds 1, 2") :]
    assert all(f"| {policy} | 2 | " in over for policy in POLICIES.split(","))
    assert (tmp_path / "means.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
