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
        status.EVENT_RING_CHANGED  # a pod joining is not a scale: the reconcile posts that
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


def messages(st):
    """Every condition whole, as `kubectl describe` shows it."""
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in st["conditions"]}


def test_the_whole_status_of_a_settled_pool() -> None:
    pods = [factories.pod("ep-test-0", ip="10.0.0.1"), factories.pod("ep-test-1", ip="10.0.0.2")]
    st = compute(pods)
    ring = st.pop("ring")
    assert ring["members"] == [{"name": "ep-test-0", "address": "10.0.0.1:8000"},
                               {"name": "ep-test-1", "address": "10.0.0.2:8000"}]  # fmt: skip
    times = {"observedGeneration": 3, "lastTransitionTime": NOW}
    assert st == {
        "observedGeneration": 3, "endpointId": "ep-test", "replicas": 2, "readyReplicas": 2,
        "selector": "kvpin.dev/endpoint=ep-test", "vramReservation": "1Gi",
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "AllReplicasReady",
             "message": "2/2 replicas ready", **times},
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
             "message": "2 serving", **times},
            {"type": "Progressing", "status": "False", "reason": "Complete",
             "message": "the pool matches the spec", **times},
            {"type": "Degraded", "status": "False", "reason": "AsExpected",
             "message": "reconciled", **times},
        ],
    }  # fmt: skip


def test_every_progressing_state_says_what_is_under_way() -> None:
    two = [factories.pod("ep-test-0"), factories.pod("ep-test-1", ip="10.0.0.2")]
    cases = [
        ({"sts": {}}, two, ("True", "Scaling", "creating the StatefulSet")),
        ({"sts": factories.statefulset(generation=2, observed=1)}, two,
         ("True", "SpecNotObserved",
          "the StatefulSet controller has not acted on the latest spec yet")),
        ({"sts": factories.statefulset(update="r2", updated=1)}, two,
         ("True", "RollingUpdate", "1/2 pods on the new revision")),
        ({}, two[:1], ("True", "Scaling", "1/2 ready, 1 pods exist")),
        ({}, [two[0], factories.pod("ep-test-1", ready=False)],
         ("True", "Scaling", "1/2 ready, 2 pods exist")),
        ({"desired": 1}, two, ("True", "Scaling", "2/1 ready, 2 pods exist")),
        ({}, two, ("False", "Complete", "the pool matches the spec")),
    ]  # fmt: skip
    for options, pods, expected in cases:
        if options.get("sts") == {}:  # no StatefulSet yet
            st = status.compute_status(
                generation=3, desired_replicas=2, endpoint_id="ep-test", selector="s",
                vram_reservation="1Gi", pods=pods, statefulset=None, default_port=8000,
                problem=None, previous={}, now=NOW,
            )  # fmt: skip
        else:
            st = compute(pods, **options)
        assert messages(st)["Progressing"] == expected, options


def test_ready_available_and_degraded_say_why() -> None:
    assert messages(compute([], desired=0))["Ready"] == (
        "False", "ScaledToZero", "the endpoint has no replicas"
    )  # fmt: skip
    one = compute([factories.pod("ep-test-0"), factories.pod("ep-test-1", ready=False)])
    assert messages(one)["Ready"] == ("False", "ReplicasNotReady", "1/2 replicas ready")
    assert messages(one)["Available"] == ("True", "MinimumReplicasAvailable", "1 serving")
    none = compute([factories.pod("ep-test-0", ready=False)])
    assert messages(none)["Available"] == ("False", "NoReplicasAvailable", "no pod is serving")
    bad = compute([], problem=status.Problem("InvalidSpec", "spec.replicas must be at least 0"))
    assert messages(bad)["Degraded"] == ("True", "InvalidSpec", "spec.replicas must be at least 0")


def failing_pod(name: str, **status_fields) -> dict:
    pod = factories.pod(name, ready=False)
    pod["status"].update(status_fields)
    return pod


def test_pod_failures_name_the_pod_the_container_and_the_kubelets_words() -> None:
    unschedulable = failing_pod("ep-test-1", conditions=[
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}])  # fmt: skip
    crash = failing_pod("ep-test-0", initContainerStatuses=[
        {"name": "fetch", "state": {"waiting": {"reason": "CrashLoopBackOff",
                                                "message": "back-off 5m0s"}}}])  # fmt: skip
    pull = failing_pod("ep-test-2", containerStatuses=[
        {"name": "engine", "state": {"waiting": {"reason": "ImagePullBackOff"}}}])  # fmt: skip
    creating = failing_pod("ep-test-3", containerStatuses=[
        {"name": "engine", "state": {"waiting": {"reason": "ContainerCreating"}}}])  # fmt: skip
    assert status.pod_failure([unschedulable, crash]) == status.Problem(
        "CrashLoopBackOff", "pod ep-test-0, container fetch: back-off 5m0s"
    )  # the first pod by name
    assert status.pod_failure([unschedulable]) == status.Problem(
        "Unschedulable", "pod ep-test-1: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    )
    assert status.pod_failure([pull]) == status.Problem(
        "ImagePullBackOff", "pod ep-test-2, container engine:"
    )
    assert status.pod_failure([creating]) is None  # starting, not failing
    assert messages(compute([creating, pull], desired=2))["Degraded"] == (
        "True", "ImagePullBackOff", "pod ep-test-2, container engine:"
    )  # fmt: skip


def test_the_progress_deadline_is_the_one_given_and_is_strict() -> None:
    started = {"type": "Progressing", "status": "True", "reason": "Scaling",
               "message": "1/2 ready, 1 pods exist", "lastTransitionTime": NOW}  # fmt: skip
    pods = [factories.pod("ep-test-0")]

    def at(seconds: int, deadline: int) -> tuple:
        stamp = f"2026-01-01T00:{(10 + seconds) // 60:02d}:{(10 + seconds) % 60:02d}Z"
        return messages(status.compute_status(
            generation=3, desired_replicas=2, endpoint_id="ep-test", selector="s",
            vram_reservation="1Gi", pods=pods, statefulset=factories.statefulset(),
            default_port=8000, problem=None, previous={"conditions": [started]}, now=stamp,
            progress_deadline_s=deadline,
        ))["Progressing"]  # fmt: skip

    assert at(60, 60) == ("True", "Scaling", "1/2 ready, 1 pods exist")  # exactly at: not yet
    assert at(61, 60) == ("False", "ProgressDeadlineExceeded",
                          "no completion in 60s: 1/2 ready, 1 pods exist")  # fmt: skip
    assert at(61, 120)[0] == "True"


def test_every_event_says_what_changed() -> None:
    pods = [factories.pod("ep-test-0", ip="10.0.0.1"), factories.pod("ep-test-1", ip="10.0.0.2")]
    settled = compute(pods)
    rolling = compute(pods, sts=factories.statefulset(update="r2", updated=0))
    scaled = compute(pods, desired=3)
    degraded = compute(pods, problem=status.Problem("ChildNotOwned", "Service ep-test exists"))
    empty = compute([])
    version = settled["ring"]["version"]
    assert status.compute_events(empty, settled) == [
        status.Event("Normal", "RingChanged", f"ring {version}: 2 members (ep-test-0, ep-test-1)")
    ]
    assert status.compute_events(settled, empty) == [
        status.Event("Normal", "RingChanged", f"ring {empty['ring']['version']}: 0 members (none)")
    ]
    assert status.compute_events(settled, rolling) == [
        status.Event("Normal", "RolloutStarted", "0/2 pods on the new revision")
    ]
    assert status.compute_events(rolling, settled) == [
        status.Event("Normal", "RolloutFinished", "all pods on the new revision")
    ]
    assert status.compute_events(settled, scaled) == []  # the spec's count: not an event here
    assert status.compute_events(settled, degraded) == [
        status.Event("Warning", "Degraded", "ChildNotOwned: Service ep-test exists")
    ]
    assert status.compute_events(degraded, degraded) == []
    assert status.compute_events(degraded, settled) == [
        status.Event("Normal", "Recovered", "the endpoint reconciles again")
    ]
    assert status.compute_events({}, settled)[-1].reason == "RingChanged"


def test_a_scale_is_the_statefulsets_replicas_changing() -> None:
    before = {**factories.statefulset(), "spec": {"replicas": 2}}
    assert status.scaling_event(before, 3) == status.Event("Normal", "Scaled", "replicas 2 -> 3")
    assert status.scaling_event(before, 2) is None
    assert status.scaling_event(None, 2) is None  # created, not scaled
    assert status.scaling_event({"spec": {}}, 2) is None


def test_replicas_are_the_pods_that_exist_not_the_desired_count() -> None:
    leaving = factories.pod("ep-test-1", ip="10.0.0.2")
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    st = compute([factories.pod("ep-test-0"), leaving], desired=3)
    assert (st["replicas"], st["readyReplicas"]) == (1, 1)
    assert compute([], desired=3)["replicas"] == 0


def test_every_condition_and_event_reason_is_documented_in_the_readme() -> None:
    import pathlib

    readme = (pathlib.Path(__file__).resolve().parents[3] / "README.md").read_text()
    reasons = [
        value for name, value in vars(status).items()
        if name.startswith(("REASON_", "EVENT_")) and isinstance(value, str)
    ]  # fmt: skip
    assert len(reasons) > 15
    assert [r for r in [*reasons, *status.POD_FAILURES] if f"`{r}`" not in readme] == []
