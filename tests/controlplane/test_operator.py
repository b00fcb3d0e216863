"""The real `kvpin operator` process against a real API server, scheduler, controller manager
and KWOK: children, scheduling on GPU nodes, status.ring, scaling, rollout, deletion, and the
Degraded cases."""

from __future__ import annotations

import json
import pathlib
import time
import urllib.request
from typing import Any

import pytest
import yaml

from kvpin import api
from tests import crd, figures
from tests.controlplane import cluster, operators
from tests.controlplane.kube import Kube, wait_for

pytestmark = [pytest.mark.controlplane, pytest.mark.usefixtures("operator_process")]


def endpoint(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {"name": name},
        "spec": {
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "replicas": 2,
            "vramReservation": "40Gi",
            "engine": {"preset": "vllm"},
            "gpu": {"count": 1, "product": cluster.GPU_PRODUCT},
            **spec,
        },
    }


def ring_names(client: Kube, ns: str, name: str) -> list[str]:
    ring = (client.endpoint(ns, name).get("status") or {}).get("ring") or {}
    return [m["name"] for m in ring.get("members", [])]


def wait_event(client: Kube, ns: str, name: str, kind: str, reason: str) -> None:
    """Events are posted by kopf shortly after the status that caused them: wait for one."""
    wait_for(
        f"a {kind} {reason} Event on {name}",
        lambda: any(e["reason"] == reason and e["type"] == kind for e in client.events(ns, name)),
        timeout=10,
    )


def wait_ring(client: Kube, ns: str, name: str, expected: list[str], timeout: float = 30) -> None:
    wait_for(
        f"status.ring of {name} == {expected}",
        lambda: ring_names(client, ns, name) == expected,
        timeout,
    )


def test_endpoint_becomes_a_pinned_pool_with_a_ring(client: Kube, namespace: str) -> None:
    started = time.monotonic()
    client.create_endpoint(namespace, endpoint("ep-a"))
    wait_for("the StatefulSet", lambda: client.statefulset(namespace, "ep-a"))
    created_in = time.monotonic() - started
    for kind in ("Service", "PodDisruptionBudget"):  # applied before it (a name conflict stops)
        wait_for(kind, lambda kind=kind: client.exists(kind, namespace, "ep-a"), timeout=5)
    wait_ring(client, namespace, "ep-a", ["ep-a-0", "ep-a-1"])
    figures.record("CR applied -> StatefulSet exists", f"{created_in:.2f}s")

    cep = client.endpoint(namespace, "ep-a")
    pods = client.pods(namespace, "ep-a")
    by_name = {p["metadata"]["name"]: p for p in pods}
    for member in cep["status"]["ring"]["members"]:
        pod = by_name[member["name"]]
        assert member["address"] == f"{pod['status']['podIP']}:8000"
        assert pod["status"]["podIP"].startswith("127.1.")
        assert pod["spec"]["nodeName"].startswith("gpu-node-")  # scheduled on GPU nodes only
        assert pod["metadata"]["annotations"][api.ANNOTATION_VRAM] == "40Gi"
        assert pod["metadata"]["annotations"][api.ANNOTATION_VRAM_BYTES] == str(40 * 2**30)
    # The ring follows Ready pods at once; Progressing turns False only once the StatefulSet
    # controller has also reported the rollout done, which may come a moment later.
    settled = {"Ready": "True", "Available": "True", "Progressing": "False", "Degraded": "False"}

    def conditions() -> dict[str, str]:
        status = client.endpoint(namespace, "ep-a")["status"]
        return {c["type"]: c["status"] for c in status["conditions"]}

    wait_for(f"conditions {settled}", lambda: conditions() == settled, timeout=30)
    cep = client.endpoint(namespace, "ep-a")
    assert cep["status"]["readyReplicas"] == 2
    assert cep["status"]["observedGeneration"] == cep["metadata"]["generation"]
    wait_event(client, namespace, "ep-a", "Normal", "RingChanged")


def test_pods_without_room_on_gpu_nodes_stay_pending(client: Kube, namespace: str) -> None:
    # 2 GPU nodes x 8 GPUs: a pod asking for 16 fits nowhere, and never lands on the CPU node.
    client.create_endpoint(namespace, endpoint("ep-big", replicas=1, gpu={"count": 16}))
    degraded = wait_for(
        "Degraded Unschedulable",
        lambda: (
            (c := client.condition(namespace, "ep-big", "Degraded")).get("status") == "True" and c
        ),
    )
    assert degraded["reason"] == "Unschedulable"
    assert degraded["message"].startswith("pod ep-big-0: 0/")  # the scheduler's own words
    pod = client.pods(namespace, "ep-big")[0]
    assert not pod["spec"].get("nodeName")
    assert ring_names(client, namespace, "ep-big") == []
    assert client.condition(namespace, "ep-big", "Ready")["status"] == "False"
    assert client.condition(namespace, "ep-big", "Available")["status"] == "False"


def test_scaling_adds_and_removes_the_highest_ordinals(
    control_plane: cluster.ControlPlane, client: Kube, namespace: str
) -> None:
    client.create_endpoint(namespace, endpoint("ep-s", replicas=1))
    wait_ring(client, namespace, "ep-s", ["ep-s-0"])
    assert not client.exists("PodDisruptionBudget", namespace, "ep-s")
    control_plane.kubectl("scale", "-n", namespace, "cep/ep-s", "--replicas=3")
    wait_ring(client, namespace, "ep-s", ["ep-s-0", "ep-s-1", "ep-s-2"])
    wait_for("the PDB", lambda: client.exists("PodDisruptionBudget", namespace, "ep-s"))
    control_plane.kubectl("scale", "-n", namespace, "cep/ep-s", "--replicas=1")
    wait_ring(client, namespace, "ep-s", ["ep-s-0"])
    wait_for("the PDB gone", lambda: not client.exists("PodDisruptionBudget", namespace, "ep-s"))
    wait_event(client, namespace, "ep-s", "Normal", "Scaled")


def test_a_deleted_pod_comes_back_under_its_name(client: Kube, namespace: str) -> None:
    client.create_endpoint(namespace, endpoint("ep-d"))
    wait_ring(client, namespace, "ep-d", ["ep-d-0", "ep-d-1"])
    old_uid = client.pods(namespace, "ep-d")[1]["metadata"]["uid"]
    client.core.delete_namespaced_pod("ep-d-1", namespace, grace_period_seconds=0)

    def replaced() -> dict[str, Any] | None:
        pods = {p["metadata"]["name"]: p for p in client.pods(namespace, "ep-d")}
        pod = pods.get("ep-d-1")
        if not pod or pod["metadata"]["uid"] == old_uid or not pod["status"].get("podIP"):
            return None
        return pod

    pod = wait_for("a new pod named ep-d-1", replaced)
    address = f"{pod['status']['podIP']}:8000"
    wait_for(
        "the ring to list the new pod under the old name",
        lambda: (
            {"name": "ep-d-1", "address": address}
            in client.endpoint(namespace, "ep-d")["status"]["ring"]["members"]
        ),
    )
    assert ring_names(client, namespace, "ep-d") == ["ep-d-0", "ep-d-1"]


def test_a_spec_change_rolls_the_pool(client: Kube, namespace: str) -> None:
    client.create_endpoint(namespace, endpoint("ep-r"))
    wait_ring(client, namespace, "ep-r", ["ep-r-0", "ep-r-1"])
    client.patch_endpoint(namespace, "ep-r", {"spec": {"vramReservation": "60Gi"}})

    def rolled() -> bool:
        pods = client.pods(namespace, "ep-r")
        return len(pods) == 2 and all(
            p["metadata"]["annotations"][api.ANNOTATION_VRAM] == "60Gi"
            and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in p["status"].get("conditions", [])
            )
            for p in pods
        )

    wait_for("both pods on the new reservation", rolled, timeout=60)
    wait_ring(client, namespace, "ep-r", ["ep-r-0", "ep-r-1"])
    wait_for(
        "Progressing=False",
        lambda: client.condition(namespace, "ep-r", "Progressing").get("status") == "False",
    )
    args = client.statefulset(namespace, "ep-r")["spec"]["template"]["spec"]["containers"][0][
        "args"
    ]
    assert args[args.index("--kv-cache-memory-bytes") + 1] == str(60 * 2**30)


def test_the_status_never_claims_a_spec_change_done_before_it_is(
    client: Kube, namespace: str
) -> None:
    client.create_endpoint(namespace, endpoint("ep-g"))
    wait_ring(client, namespace, "ep-g", ["ep-g-0", "ep-g-1"])
    generation = client.endpoint(namespace, "ep-g")["metadata"]["generation"]
    client.patch_endpoint(namespace, "ep-g", {"spec": {"vramReservation": "60Gi"}})
    seen_new = False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        st = client.endpoint(namespace, "ep-g").get("status") or {}
        progressing = {c["type"]: c for c in st.get("conditions", [])}.get("Progressing", {})
        if st.get("observedGeneration", 0) > generation:
            seen_new = True
            if progressing.get("status") == "False":  # done: every pod must be on 60Gi now
                pods = client.pods(namespace, "ep-g")
                vram = {p["metadata"]["annotations"][api.ANNOTATION_VRAM] for p in pods}
                sts = client.statefulset(namespace, "ep-g") or {}
                assert vram == {"60Gi"}, (progressing, vram, sts.get("metadata", {}).get(
                    "generation"), sts.get("status"))  # fmt: skip
                break
        time.sleep(0.02)
    assert seen_new


def test_an_apply_the_server_rejects_is_degraded_not_retried_forever(
    client: Kube, namespace: str
) -> None:
    bad = {"volumeMounts": [{"name": "nope", "mountPath": "/cache"}]}  # mounts no volume
    client.create_endpoint(namespace, endpoint("ep-bad", pod=bad))
    degraded = wait_for(
        "Degraded ChildRejected",
        lambda: (
            (c := client.condition(namespace, "ep-bad", "Degraded")).get("status") == "True" and c
        ),
    )
    assert degraded["reason"] == "ChildRejected"
    assert "StatefulSet ep-bad" in degraded["message"] and "volumeMounts" in degraded["message"]
    time.sleep(6)  # longer than the retry delay of a temporary error
    events = [e for e in client.events(namespace, "ep-bad") if e.get("type") == "Warning"]
    assert sum(e.get("count") or 1 for e in events) <= 2, events
    client.patch_endpoint(namespace, "ep-bad", {"spec": {"pod": {"volumeMounts": None}}})
    wait_ring(client, namespace, "ep-bad", ["ep-bad-0", "ep-bad-1"])  # fixed: it converges


def test_no_finalizer_and_drifted_children_are_repaired_in_seconds(
    client: Kube, namespace: str
) -> None:
    # An object with a finalizer could not be deleted while the operator is gone (after helm
    # uninstall, with its namespace or the CRD); the periodic resync needs none.
    client.create_endpoint(namespace, endpoint("ep-f"))
    wait_ring(client, namespace, "ep-f", ["ep-f-0", "ep-f-1"])
    assert not client.endpoint(namespace, "ep-f")["metadata"].get("finalizers")
    wait_for("the PDB", lambda: client.exists("PodDisruptionBudget", namespace, "ep-f"))

    def timed(what: str, probe: Any) -> float:
        started = time.monotonic()
        wait_for(what, probe, 20)
        return time.monotonic() - started

    samples = []
    client.core.delete_namespaced_service("ep-f", namespace)
    samples.append(timed("the Service back", lambda: client.exists("Service", namespace, "ep-f")))
    client.policy.delete_namespaced_pod_disruption_budget("ep-f", namespace)
    pdb = "PodDisruptionBudget"
    samples.append(timed("the PDB back", lambda: client.exists(pdb, namespace, "ep-f")))
    client.apps.patch_namespaced_stateful_set("ep-f", namespace, {"spec": {"replicas": 5}})
    samples.append(timed(
        "the StatefulSet's replicas back",
        lambda: (client.statefulset(namespace, "ep-f") or {})["spec"]["replicas"] == 2,
    ))  # fmt: skip
    figures.record("drifted child (deleted Service, deleted PDB, edited StatefulSet) -> repaired",
                   " / ".join(f"{s:.2f}s" for s in samples))  # fmt: skip
    assert max(samples) < 3  # the resync every 5 s would also get there; events get there first


def test_deleting_the_endpoint_collects_its_children(client: Kube, namespace: str) -> None:
    client.create_endpoint(namespace, endpoint("ep-x"))
    wait_ring(client, namespace, "ep-x", ["ep-x-0", "ep-x-1"])
    client.delete_endpoint(namespace, "ep-x")
    for kind in ("StatefulSet", "Service", "PodDisruptionBudget"):
        wait_for(f"{kind} collected", lambda kind=kind: not client.exists(kind, namespace, "ep-x"))
    wait_for("pods gone", lambda: not client.pods(namespace, "ep-x"))


def test_two_claims_on_one_endpoint_id(client: Kube, namespace: str) -> None:
    client.create_endpoint(namespace, endpoint("ep-first", replicas=1, endpointId="ep-shared"))
    wait_ring(client, namespace, "ep-first", ["ep-first-0"])
    client.create_endpoint(namespace, endpoint("ep-second", replicas=1, endpointId="ep-shared"))
    degraded = wait_for(
        "ep-second Degraded",
        lambda: (
            (c := client.condition(namespace, "ep-second", "Degraded")).get("status") == "True"
            and c
        ),
    )
    assert degraded["reason"] == "EndpointIdConflict"
    assert "ep-first" in degraded["message"]
    assert client.statefulset(namespace, "ep-second") is None  # touches nothing
    assert ring_names(client, namespace, "ep-first") == ["ep-first-0"]
    wait_event(client, namespace, "ep-second", "Warning", "Degraded")
    # The winner is deleted: the other claimant gets the id from the deletion's own event,
    # not from the next resync (every 5 s here).
    client.delete_endpoint(namespace, "ep-first")
    started = time.monotonic()
    wait_for("ep-second's StatefulSet", lambda: client.statefulset(namespace, "ep-second"), 10)
    taken = time.monotonic() - started
    figures.record("endpoint id released -> the other claimant's StatefulSet", f"{taken:.2f}s")
    assert taken < 2
    wait_ring(client, namespace, "ep-second", ["ep-second-0"])


def test_an_endpoint_id_claimed_in_another_namespace(client: Kube, namespace: str) -> None:
    # One router serves ids from every namespace it watches: a claim in another is a conflict.
    other, shared = f"{namespace}-b", f"{namespace}-id"
    client.create_namespace(other)
    try:
        client.create_endpoint(namespace, endpoint("ep-one", replicas=1, endpointId=shared))
        wait_ring(client, namespace, "ep-one", ["ep-one-0"])
        client.create_endpoint(other, endpoint("ep-one", replicas=1, endpointId=shared))
        degraded = wait_for(
            "the second claim Degraded",
            lambda: (
                (c := client.condition(other, "ep-one", "Degraded")).get("status") == "True" and c
            ),
        )
        assert degraded["reason"] == "EndpointIdConflict"
        assert f"already claimed by CachedEndpoint {namespace}/ep-one;" in degraded["message"]
        assert client.statefulset(other, "ep-one") is None
        assert ring_names(client, namespace, "ep-one") == ["ep-one-0"]
    finally:
        client.delete_namespace(other)


def test_an_orphaned_pool_is_adopted_with_its_pods(
    control_plane: cluster.ControlPlane, client: Kube, namespace: str
) -> None:
    # `kubectl delete --cascade=orphan` leaves the children; the object made again adopts them
    # and the pods (and their caches) live on, under the same uids.
    client.create_endpoint(namespace, endpoint("ep-o", replicas=1))
    wait_ring(client, namespace, "ep-o", ["ep-o-0"])
    pod_uid = client.pods(namespace, "ep-o")[0]["metadata"]["uid"]
    control_plane.kubectl("delete", "-n", namespace, "cep/ep-o", "--cascade=orphan")
    wait_for(
        "the StatefulSet orphaned",
        lambda: not (client.statefulset(namespace, "ep-o") or {"metadata": {"x": 1}})["metadata"]
        .get("ownerReferences"),
    )  # fmt: skip
    uid = client.create_endpoint(namespace, endpoint("ep-o", replicas=1))["metadata"]["uid"]
    wait_for(
        "the StatefulSet adopted",
        lambda: [r["uid"] for r in (client.statefulset(namespace, "ep-o") or {})["metadata"]
                 .get("ownerReferences") or []] == [uid],
    )  # fmt: skip
    wait_ring(client, namespace, "ep-o", ["ep-o-0"])
    assert client.pods(namespace, "ep-o")[0]["metadata"]["uid"] == pod_uid
    assert client.condition(namespace, "ep-o", "Degraded")["status"] == "False"


def test_namespace_globs_list_only_the_namespaces_they_match(
    control_plane: cluster.ControlPlane, client: Kube, namespace: str
) -> None:
    import kubernetes.config

    from kvpin.operator import cluster as clusters

    client.create_endpoint(namespace, endpoint("ep-glob", replicas=0))
    io = clusters.Cluster(kubernetes.config.new_client_from_config(str(control_plane.kubeconfig)))
    names = {(b["metadata"]["namespace"], b["metadata"]["name"])
             for b in io.list_all_endpoints([f"{namespace[:6]}*", "no-such-*"])}  # fmt: skip
    assert (namespace, "ep-glob") in names
    assert all(ns.startswith(namespace[:6]) for ns, _ in names)
    assert (namespace, "ep-glob") in {
        (b["metadata"]["namespace"], b["metadata"]["name"])
        for b in io.list_all_endpoints([namespace])
    }


def test_a_child_name_taken_by_a_stranger(client: Kube, namespace: str) -> None:
    client.core.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "ep-taken"},
            "spec": {"ports": [{"port": 80}], "selector": {"app": "other"}},
        },
    )
    client.create_endpoint(namespace, endpoint("ep-taken", replicas=1))
    degraded = wait_for(
        "Degraded ChildNotOwned",
        lambda: (
            (c := client.condition(namespace, "ep-taken", "Degraded")).get("status") == "True" and c
        ),
    )
    assert degraded["reason"] == "ChildNotOwned"
    svc = client.core.read_namespaced_service("ep-taken", namespace)
    assert svc.spec.selector == {"app": "other"}  # untouched
    assert not svc.metadata.owner_references
    assert client.statefulset(namespace, "ep-taken") is None  # no GPU pod was started


def test_a_reservation_larger_than_the_gpu_is_degraded(client: Kube, namespace: str) -> None:
    client.create_endpoint(namespace, endpoint("ep-huge", vramReservation="100Gi"))
    degraded = wait_for(
        "Degraded InvalidSpec",
        lambda: (
            (c := client.condition(namespace, "ep-huge", "Degraded")).get("status") == "True" and c
        ),
    )
    assert degraded["reason"] == "InvalidSpec"
    assert degraded["message"].endswith("at most 61Gi of KV cache fits")  # the arithmetic
    assert client.statefulset(namespace, "ep-huge") is None


def test_readiness_reaches_the_ring_quickly(
    control_plane: cluster.ControlPlane, client: Kube, namespace: str
) -> None:
    """Measure pod Ready -> status.ring: the operator reacts to pod events, not a slow poll."""
    client.create_endpoint(namespace, endpoint("ep-t", replicas=1))
    wait_ring(client, namespace, "ep-t", ["ep-t-0"])
    samples = []
    for replicas in (2, 3):
        control_plane.kubectl("scale", "-n", namespace, "cep/ep-t", f"--replicas={replicas}")
        newest = f"ep-t-{replicas - 1}"

        def ready_at(newest: str = newest) -> float | None:
            for pod in client.pods(namespace, "ep-t"):
                if pod["metadata"]["name"] == newest:
                    for c in pod["status"].get("conditions", []):
                        if c["type"] == "Ready" and c["status"] == "True":
                            return time.time()
            return None

        wait_for(f"{newest} Ready", ready_at)
        seen = time.time()
        wait_for(
            f"{newest} in ring",
            lambda newest=newest: newest in ring_names(client, namespace, "ep-t"),
        )
        samples.append(time.time() - seen)
    figures.record(
        "pod Ready (as observed) -> status.ring", ", ".join(f"{s:.2f}s" for s in samples)
    )
    assert max(samples) < 5  # a resync every 5 s would also get there; events get there first


def test_a_fresh_operator_process_converges_without_changes(
    control_plane: cluster.ControlPlane, client: Kube, namespace: str
) -> None:
    """Resume is the same reconcile as create: a second process (as after a restart) finds
    the pool already converged and changes nothing."""
    client.create_endpoint(namespace, endpoint("ep-resume", replicas=1))
    wait_ring(client, namespace, "ep-resume", ["ep-resume-0"])

    def settled() -> dict[str, Any] | None:
        sts = client.statefulset(namespace, "ep-resume")
        status = (sts or {}).get("status") or {}
        done = status.get("readyReplicas") == 1 and status.get("updatedReplicas") == 1
        return (
            sts
            if done and status.get("observedGeneration") == sts["metadata"]["generation"]
            else None
        )

    wait_for("the StatefulSet to settle", settled)
    time.sleep(1)
    before = client.statefulset(namespace, "ep-resume")
    ring_before = client.endpoint(namespace, "ep-resume")["status"]["ring"]
    second = operators.spawn(control_plane, "-n", namespace)
    try:
        time.sleep(3)
        after = client.statefulset(namespace, "ep-resume")
        assert after["metadata"]["generation"] == before["metadata"]["generation"]
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        assert client.endpoint(namespace, "ep-resume")["status"]["ring"] == ring_before
    finally:
        operators.stop(second)


def test_metrics_and_json_logs(
    control_plane: cluster.ControlPlane, client: Kube, namespace: str
) -> None:
    operator = operators.spawn(control_plane, "-n", namespace, "--log-json")
    try:
        client.create_endpoint(namespace, endpoint("ep-m", replicas=1))
        wait_ring(client, namespace, "ep-m", ["ep-m-0"])
        url = f"http://127.0.0.1:{operator.metrics_port}/metrics"
        ready = f'kvpin_operator_endpoint_condition{{endpoint="ep-m",namespace="{namespace}",'

        def reconciled() -> str | None:
            # the status the test saw is on the API server before the operator, reading the
            # patch's answer, sets its gauge: wait for the gauge, not only the reconcile
            text = urllib.request.urlopen(url, timeout=2).read().decode()
            done = 'kvpin_operator_reconciles_total{result="ok"}' in text
            return text if done and ready + 'status="True",type="Ready"} 1.0' in text else None

        text = wait_for("reconcile metrics", reconciled)
        for name in (
            "kvpin_operator_reconcile_duration_seconds_count",
            "kvpin_operator_status_writes_total",
            "kvpin_operator_ring_changes_total",
        ):
            assert name in text
        assert ready + 'status="False",type="Ready"} 0.0' in text
        client.delete_endpoint(namespace, "ep-m")

        def forgotten() -> bool:
            text = urllib.request.urlopen(url, timeout=2).read().decode()
            return not any(
                line.startswith("kvpin_operator_endpoint_condition{") and 'endpoint="ep-m"' in line
                for line in text.splitlines()
            )

        wait_for("the deleted endpoint's series gone", forgotten)
    finally:
        operators.stop(operator)
    lines = [line for line in operator.log.read_text().splitlines() if line.startswith("{")]
    assert lines, "no JSON log lines"
    assert all("message" in json.loads(line) for line in lines)


@pytest.mark.parametrize("path", crd.EXAMPLES, ids=lambda p: p.name)
def test_every_examples_children_are_accepted_by_the_api_server(
    control_plane: cluster.ControlPlane, client: Kube, namespace: str, path: pathlib.Path
) -> None:
    # Admission of the CachedEndpoint is not enough: the StatefulSet the operator renders from
    # it (claim templates, probes, the hub token's secretKeyRef) must pass the server's own
    # validation, or the endpoint would sit in ChildRejected.
    control_plane.kubectl("apply", "-n", namespace, "-f", str(path))
    name = yaml.safe_load(path.read_text())["metadata"]["name"]
    sts = wait_for(f"{name}'s StatefulSet", lambda: client.statefulset(namespace, name))
    degraded = client.condition(namespace, name, "Degraded")
    assert degraded.get("reason") != "ChildRejected", degraded
    if name == "ep-support":
        assert [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]] == ["models"]
        (engine,) = sts["spec"]["template"]["spec"]["containers"]
        assert engine["startupProbe"]["failureThreshold"] == 360
