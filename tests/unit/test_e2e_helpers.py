"""What the kind e2e tier does that needs no Docker: its time budget, its tool check and the
switch that makes a missing tool fail, polling, the GPU endpoint it applies (rendered by the
operator's own builders against kind-config.yaml's nodes), and the CI job that runs it."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from kvpin.operator import desired, quantity, spec
from tests.e2e import kind
from tests.e2e import test_kind as e2e

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_e2e_timeout_covers_fixture_set_up_and_every_step() -> None:
    marks = [m for m in e2e.pytestmark if m.name == "timeout"]
    assert marks, "without its own timeout the tier inherits the suite's 300 s"
    (timeout,) = marks[0].args
    assert timeout >= sum(kind.BUDGET.values()) > 300


def test_a_missing_tool_skips_unless_the_tier_is_required(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reason = kind.missing(which=lambda tool: None if tool == "kind" else f"/usr/bin/{tool}")
    assert reason == "kind is not installed"
    monkeypatch.delenv(kind.REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="kind is not installed"):
        kind.unavailable(reason)
    monkeypatch.setenv(kind.REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="required"):
        kind.unavailable(reason)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_poll_retries_until_a_value_and_treats_refused_connections_as_not_yet() -> None:
    clock, answers = FakeClock(), iter([ConnectionRefusedError(), None, 0, "ready"])

    def probe() -> str | int | None:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert kind.poll("x", probe, timeout=10, clock=clock, sleep=clock.sleep) == "ready"
    assert clock.now == 3.0


def test_poll_gives_up_at_the_deadline_naming_what_it_waited_for() -> None:
    clock, calls = FakeClock(), []
    with pytest.raises(AssertionError, match="waiting for the router"):
        kind.poll("the router", lambda: calls.append(1), timeout=5, interval=2, clock=clock,
                  sleep=clock.sleep)  # fmt: skip
    assert len(calls) == 4  # at 0, 2, 4 and 6 s: the last try is past the deadline
    with pytest.raises(ZeroDivisionError):  # a bug in the probe is not waited out
        kind.poll("x", lambda: 1 / 0, timeout=5, clock=clock, sleep=clock.sleep)


def _tolerated(taint: dict, tolerations: list[dict]) -> bool:
    return any(
        t.get("key") == taint["key"]
        and t.get("effect", taint["effect"]) == taint["effect"]
        and (t.get("operator") == "Exists" or t.get("value") == taint.get("value"))
        for t in tolerations
    )


def _selected(labels: dict[str, str], affinity: dict) -> bool:
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return any(
        all(labels.get(e["key"]) in e["values"] for e in term["matchExpressions"])
        for term in terms["nodeSelectorTerms"]
    )


def test_the_gpu_endpoint_lands_only_on_the_gpu_workers_and_fits_a_ci_runner() -> None:
    workers = kind.gpu_workers()
    assert len(workers) == 2 and all(w["taints"] for w in workers)
    parsed = spec.parse(kind.gpu_endpoint("ep-gpu", image="kvpin:e2e"))
    pod = desired.build_pod_template(parsed, sim_image="unused")["spec"]
    for worker in workers:
        assert all(_tolerated(t, pod["tolerations"]) for t in worker["taints"])
        assert _selected(worker["labels"], pod["affinity"])
    assert not _selected({}, pod["affinity"])  # the CPU worker has no GPU labels
    resources = pod["containers"][0]["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == 1
    assert quantity.parse_bytes(resources["requests"]["memory"]) <= 2**30
    assert resources["requests"]["cpu"] == kind.POD_REQUESTS["cpu"] == "100m"


def test_the_ci_job_requires_the_tier_and_pins_its_tools() -> None:
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yaml").read_text())
    job = workflow["jobs"]["e2e"]
    assert job["env"][kind.REQUIRE_ENV] == "1"
    pins = dict(
        line.split("=", 1)
        for line in (ROOT / "hack" / "controlplane.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    steps = {s.get("uses", "").split("@")[0]: s.get("with", {}) for s in job["steps"]}
    assert steps["helm/kind-action"]["version"] == "${{ env.KIND_VERSION }}"
    assert steps["helm/kind-action"]["kubectl_version"] == "${{ env.KUBERNETES_VERSION }}"
    assert steps["azure/setup-helm"]["version"] == "${{ env.HELM_VERSION }}"
    assert {"KIND_VERSION", "KUBERNETES_VERSION", "HELM_VERSION"} <= pins.keys()
    assert any("hack/controlplane.env" in s.get("run", "") for s in job["steps"])
    assert "pytest -m e2e" in job["steps"][-1]["run"]
