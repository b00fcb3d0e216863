"""The lifecycle scenario's plan and its figures per phase (bench.scenarios)."""

import asyncio
import math

from kvpin.bench import scenarios, targets
from kvpin.bench.scoring import Record

URLS = ["http://a", "http://b", "http://c", "http://d", "http://spare"]


def test_the_scale_plan_joins_restarts_elsewhere_and_leaves() -> None:
    assert scenarios.members_after(URLS, 0) == {
        "pod-0": "http://a", "pod-1": "http://b", "pod-2": "http://c"}  # fmt: skip
    assert scenarios.members_after(URLS, 1)["pod-3"] == "http://d"
    restarted = scenarios.members_after(URLS, 2)
    assert restarted["pod-0"] == "http://spare" and len(restarted) == 4  # same name, new address
    assert scenarios.members_after(URLS, 3) == {
        "pod-0": "http://spare", "pod-2": "http://c", "pod-3": "http://d"}  # fmt: skip


def record(started: float, cached: int, ttft: float = 0.1, ok: bool = True) -> Record:
    return Record("ep", started, ttft, 100, cached, ok)


def test_records_fall_in_the_phase_they_were_sent_in() -> None:
    records = [record(0.5, 10), record(1.0, 20), record(2.5, 30), record(9.0, 40)]
    split = scenarios.phases(records, [1.0, 2.0, 3.0])
    assert [[r.cached_tokens for r in p] for p in split] == [[10], [20], [30], [40]]
    figures = scenarios.figures([record(0, 50, 0.2), record(0, 0, 0.4), record(0, 0, 9, ok=False)])
    assert figures.requests == 3 and figures.hit_rate == 0.25
    assert math.isclose(figures.ttft_p99_s, 0.4, rel_tol=0.05)  # failed requests left out


def test_the_plan_is_applied_as_the_run_reaches_each_point() -> None:
    async def run() -> tuple[list[float], list[str]]:
        target = targets.Baseline("round-robin", {"ep": URLS[:3]})
        answered, times = scenarios.Answered(), []
        follow = asyncio.create_task(
            scenarios.follow(target, {"ep": URLS}, answered=answered, total=12, times=times)
        )
        answered.tick(3)
        await asyncio.sleep(0)
        assert times == []  # a third of 12 is 4
        answered.tick(1)
        for _ in range(3):
            await asyncio.sleep(0)
        assert len(times) == 1 and target.pools["ep"] == URLS[:4]
        answered.tick(8)
        await asyncio.wait_for(follow, 1)
        return times, target.pools["ep"]

    times, pool = asyncio.run(run())
    assert len(times) == 3 and times == sorted(times)
    assert sorted(pool) == ["http://c", "http://d", "http://spare"]
