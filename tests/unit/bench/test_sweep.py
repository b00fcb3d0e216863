"""The load sweep's table and knee (bench.sweep)."""

from kvpin.bench import sweep
from kvpin.bench.scoring import Summary


def summary(policy: str, p90_s: float, errors: int = 0) -> Summary:
    return Summary(policy, 100, errors, 0.5, 0.9, p90_s / 2, p90_s * 2, p90_s / 2, 10.0, 10.0,
                   1.0, prefill_tokens=1234, ttft_p90_s=p90_s)  # fmt: skip


def test_the_knee_is_the_first_rate_where_p90_triples() -> None:
    points = [(1.0, summary("kvpin", 0.1)), (1.0, summary("rr", 0.1)),
              (2.0, summary("kvpin", 0.2)), (2.0, summary("rr", 0.5)),
              (4.0, summary("kvpin", 0.4)), (4.0, summary("rr", 2.0, errors=3))]  # fmt: skip
    assert sweep.knee(points, "rr") == 2.0
    assert sweep.knee(points, "kvpin") == 4.0
    assert sweep.knee(points, "other") is None
    table = sweep.markdown(points)
    assert "| 4 | rr | 10.0 | 1000 | 2000 | 4000 | 50.0% | 1,234 | 3 |" in table
