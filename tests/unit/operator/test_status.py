from kvpin import api
from kvpin.operator import status
from tests import factories

NOW = "2026-01-01T00:00:10Z"


def compute(pods, *, desired=2, sts=None, problem=None, previous=None, now=NOW):
    return status.compute_status(
        generation=3,
        desired_replicas=desired,
        endpoint_id="ep-test",
        selector="kvpin.dev/endpoint=ep-test",
        vram_reservation="1Gi",
        pods=pods,
        statefulset=sts if sts is not None else factories.statefulset(),
        default_port=8000,
        problem=problem,
        previous=previous or {},
        now=now,
    )


def conditions(st):
    return {c["type"]: (c["status"], c["reason"]) for c in st["conditions"]}


def test_ring_has_one_member_per_ready_pod() -> None:
    pods = [
        factories.pod("ep-test-0", ip="10.0.0.5"),
        factories.pod("ep-test-1", ip="10.0.0.6", port=9000),
        factories.pod("ep-test-2", ready=False),
        factories.pod("ep-test-3", ip=None),
        factories.pod("ep-test-4", deleting=True),
    ]
    st = compute(pods, desired=5)
    assert st["ring"]["members"] == [
        {"name": "ep-test-0", "address": "10.0.0.5:8000"},
        {"name": "ep-test-1", "address": "10.0.0.6:9000"},
    ]
    assert st["ring"]["size"] == 2
    assert st["readyReplicas"] == 2
    assert conditions(st)["Ready"] == ("False", status.REASON_NOT_READY)
    assert conditions(st)["Progressing"] == ("True", status.REASON_SCALING)


def test_ring_version_changes_exactly_when_the_member_set_changes() -> None:
    a = [factories.pod("ep-test-0", ip="10.0.0.5"), factories.pod("ep-test-1", ip="10.0.0.6")]
    v1 = compute(a)["ring"]["version"]
    assert compute(list(reversed(a)))["ring"]["version"] == v1  # order does not matter
    assert (
        compute([*a, factories.pod("ep-test-2", ready=False)], desired=3)["ring"]["version"] == v1
    )
    moved = [a[0], factories.pod("ep-test-1", ip="10.0.0.9")]  # restarted with a new IP
    assert compute(moved)["ring"]["version"] != v1
    assert compute(a[:1])["ring"]["version"] != v1


def test_all_ready_and_settled() -> None:
    pods = [factories.pod("ep-test-0"), factories.pod("ep-test-1", ip="10.0.0.2")]
    st = compute(pods)
    assert conditions(st) == {
        "Ready": ("True", status.REASON_ALL_READY),
        "Available": ("True", status.REASON_SOME_AVAILABLE),
        "Progressing": ("False", status.REASON_COMPLETE),
        "Degraded": ("False", status.REASON_AS_EXPECTED),
    }
    assert st["observedGeneration"] == 3
    assert st["selector"] == "kvpin.dev/endpoint=ep-test"


def test_rolling_update_is_progressing() -> None:
    pods = [factories.pod("ep-test-0"), factories.pod("ep-test-1", ip="10.0.0.2")]
    st = compute(pods, sts=factories.statefulset(update="r2", current="r1", updated=1))
    assert conditions(st)["Progressing"] == ("True", status.REASON_ROLLING)


def test_a_spec_the_statefulset_controller_has_not_seen_is_progressing() -> None:
    # right after a spec change the revisions still agree: only the generations tell
    pods = [factories.pod("ep-test-0"), factories.pod("ep-test-1", ip="10.0.0.2")]
    st = compute(pods, sts=factories.statefulset(generation=2, observed=1))
    assert conditions(st)["Progressing"] == ("True", status.REASON_PENDING)
    st = compute(pods, sts=factories.statefulset(generation=2, observed=2))
    assert conditions(st)["Progressing"] == ("False", status.REASON_COMPLETE)


def test_scaled_to_zero_is_not_ready() -> None:
    assert conditions(compute([], desired=0))["Ready"] == ("False", status.REASON_SCALED_TO_ZERO)


def test_problem_sets_degraded_and_an_id_conflict_hides_the_ring() -> None:
    pods = [factories.pod("ep-test-0"), factories.pod("ep-test-1", ip="10.0.0.2")]
    bad = compute(pods, problem=status.Problem(status.REASON_CHILD_CONFLICT, "taken"))
    assert conditions(bad)["Degraded"] == ("True", status.REASON_CHILD_CONFLICT)
    assert bad["ring"]["size"] == 2  # the pods still serve
    rival = compute(pods, problem=status.Problem(status.REASON_ENDPOINT_ID_CONFLICT, "x"))
    assert rival["ring"] == api.Ring().to_status()


def test_transition_times_are_kept_until_the_status_flips() -> None:
    pods = [factories.pod("ep-test-0"), factories.pod("ep-test-1", ip="10.0.0.2")]
    first = compute(pods, now="T1")
    again = compute(pods, previous=first, now="T2")
    assert [c["lastTransitionTime"] for c in again["conditions"]] == ["T1"] * 4
    flipped = compute(pods[:1], previous=first, now="T3")
    times = {c["type"]: c["lastTransitionTime"] for c in flipped["conditions"]}
    assert times == {"Ready": "T3", "Available": "T1", "Progressing": "T3", "Degraded": "T1"}


def test_events_for_transitions() -> None:
    pods = [factories.pod("ep-test-0"), factories.pod("ep-test-1", ip="10.0.0.2")]
    settled = compute(pods)
    assert status.compute_events(settled, settled) == []
    reasons = [e.reason for e in status.compute_events({}, settled)]
    assert reasons == [status.EVENT_RING_CHANGED]
    scaled = compute(
        [*pods, factories.pod("ep-test-2", ip="10.0.0.3")], desired=3, previous=settled
    )
    assert [e.reason for e in status.compute_events(settled, scaled)] == [
        status.EVENT_RING_CHANGED,
        status.EVENT_SCALED,
    ]
    rolling = compute(pods, sts=factories.statefulset(update="r2"), previous=settled)
    assert [e.reason for e in status.compute_events(settled, rolling)] == [
        status.EVENT_ROLLOUT_STARTED
    ]
    assert [e.reason for e in status.compute_events(rolling, settled)] == [
        status.EVENT_ROLLOUT_FINISHED
    ]
    degraded = compute(pods, problem=status.Problem(status.REASON_INVALID_SPEC, "bad"))
    events = status.compute_events(settled, degraded)
    assert [(e.type, e.reason) for e in events] == [("Warning", status.EVENT_DEGRADED)]
    assert "InvalidSpec: bad" in events[0].message
    assert [e.reason for e in status.compute_events(degraded, settled)] == [status.EVENT_RECOVERED]


def test_an_ipv6_pod_address_is_bracketed_so_the_router_can_use_it() -> None:
    st = compute([factories.pod("ep-test-0", ip="fd00::5")], desired=1)
    assert st["ring"]["members"] == [{"name": "ep-test-0", "address": "[fd00::5]:8000"}]
    member = api.Ring.from_status(st["ring"]).members[0]
    assert member.url == "http://[fd00::5]:8000"


def test_available_while_any_member_serves() -> None:
    one = compute([factories.pod("ep-test-0"), factories.pod("ep-test-1", ready=False)])
    assert conditions(one)["Available"] == ("True", status.REASON_SOME_AVAILABLE)
    assert conditions(one)["Ready"] == ("False", status.REASON_NOT_READY)
    none = compute([factories.pod("ep-test-0", ready=False)])
    assert conditions(none)["Available"] == ("False", status.REASON_NONE_AVAILABLE)


def stuck(name: str, *, waiting: str | None = None, unschedulable: bool = False) -> dict:
    pod = factories.pod(name, ready=False, ip=None)
    if unschedulable:
        pod["status"]["conditions"].append({
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."})  # fmt: skip
    if waiting:
        pod["status"]["containerStatuses"] = [{"name": "engine", "state": {"waiting": {
            "reason": waiting, "message": "Back-off pulling image \"vllm:typo\""}}}]  # fmt: skip
    return pod


def test_a_pod_that_cannot_start_is_named_in_degraded() -> None:
    st = compute([factories.pod("ep-test-0"), stuck("ep-test-1", waiting="ImagePullBackOff")])
    degraded = {c["type"]: c for c in st["conditions"]}["Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", "ImagePullBackOff")
    assert degraded["message"].startswith("pod ep-test-1, container engine: Back-off pulling")
    st = compute([stuck("ep-test-0", unschedulable=True), stuck("ep-test-1")])
    degraded = {c["type"]: c for c in st["conditions"]}["Degraded"]
    assert degraded["reason"] == "Unschedulable" and "Insufficient nvidia.com/gpu" in degraded[
        "message"]  # fmt: skip
    assert conditions(compute([stuck("ep-test-0", waiting="ContainerCreating")]))["Degraded"] == (
        "False", status.REASON_AS_EXPECTED)  # fmt: skip  # starting is not failing


def test_progress_that_takes_too_long_says_so_until_it_completes() -> None:
    scaling = [factories.pod("ep-test-0"), stuck("ep-test-1")]
    start = compute(scaling, now="2026-01-01T00:00:00Z")
    assert conditions(start)["Progressing"] == ("True", status.REASON_SCALING)
    later = compute(scaling, previous=start, now="2026-01-01T00:29:00Z")
    assert conditions(later)["Progressing"] == ("True", status.REASON_SCALING)
    late = compute(scaling, previous=later, now="2026-01-01T00:31:00Z")
    assert conditions(late)["Progressing"] == ("False", status.REASON_DEADLINE)
    still = compute(scaling, previous=late, now="2026-01-01T00:40:00Z")
    assert conditions(still)["Progressing"] == ("False", status.REASON_DEADLINE)
    done = [factories.pod("ep-test-0"), factories.pod("ep-test-1", ip="10.0.0.2")]
    assert conditions(compute(done, previous=still))["Progressing"] == (
        "False", status.REASON_COMPLETE)  # fmt: skip


def test_only_pods_the_statefulset_made_join() -> None:
    sts = {"metadata": {"name": "ep-test", "uid": "sts-uid"}}
    mine = factories.pod("ep-test-0")
    mine["metadata"]["ownerReferences"] = [{"kind": "StatefulSet", "name": "ep-test",
                                            "uid": "sts-uid"}]  # fmt: skip
    stray = factories.pod("ep-test-9")  # the endpoint's label, made by hand
    assert status.made_by(mine, sts)
    assert not status.made_by(stray, sts)
    assert not status.made_by(mine, {"metadata": {"uid": "another"}})
    assert not status.made_by(mine, None)
