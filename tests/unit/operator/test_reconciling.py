"""Reconcile and refresh against an in-memory cluster: the order of the I/O and what it decides.

`FakeCluster` stands in for `operator.cluster.Cluster` (the API server is what it replaces; the
control-plane tier runs the same paths against a real one). It keeps objects in a dict and
decides ownership with the real `cluster.may_apply`, so only the transport is fake.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kvpin import api
from kvpin.operator import cluster as clusters
from kvpin.operator import reconciling, status
from kvpin.operator.settings import OperatorConfig
from tests import factories


class FakeCluster:
    """The few calls `reconciling` makes, on a dict of objects."""

    def __init__(self, *endpoints: dict[str, Any]) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.applied: list[str] = []
        self.status_writes = 0
        for body in endpoints:
            self.put(copy.deepcopy(body))

    def put(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        self.objects[obj["kind"], meta.get("namespace", "default"), meta["name"]] = obj

    def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.objects.get((kind, namespace, name)))

    def apply_child(self, manifest: dict[str, Any], *, owner_uid: str) -> dict[str, Any]:
        meta = manifest["metadata"]
        existing = self.read(manifest["kind"], meta["namespace"], meta["name"])
        if not clusters.may_apply(existing, manifest, owner_uid):
            raise clusters.ChildConflictError(f"{manifest['kind']} {meta['name']} is taken")
        merged = {**(existing or {}), **copy.deepcopy(manifest)}
        merged["metadata"] = {**(existing or {}).get("metadata", {}), **manifest["metadata"]}
        merged["metadata"].setdefault("uid", f"uid-{manifest['kind']}")
        self.put(merged)
        self.applied.append(manifest["kind"])
        return merged

    def delete_child(self, kind: str, namespace: str, name: str, *, owner_uid: str) -> bool:
        existing = self.objects.get((kind, namespace, name))
        if existing is None or not clusters.owned_by(existing, owner_uid):
            return False
        del self.objects[kind, namespace, name]
        return True

    def list_pods(self, namespace: str, endpoint_name: str) -> list[dict[str, Any]]:
        return [
            copy.deepcopy(o) for (kind, ns, _), o in self.objects.items()
            if kind == "Pod" and ns == namespace
            and o["metadata"]["labels"].get(api.LABEL_ENDPOINT) == endpoint_name
        ]  # fmt: skip

    def read_endpoint(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.read(api.KIND, namespace, name)

    def list_all_endpoints(self, namespaces: Any) -> list[dict[str, Any]]:
        return [copy.deepcopy(o) for (kind, _, _), o in self.objects.items() if kind == api.KIND]

    def patch_status(self, namespace: str, name: str, new: dict[str, Any]) -> None:
        self.objects[api.KIND, namespace, name]["status"] = copy.deepcopy(new)
        self.status_writes += 1


CONFIG = OperatorConfig(sim_image="kvpin:test")


def reconcile(fake: FakeCluster, body: dict[str, Any]) -> reconciling.Outcome:
    outcome = reconciling.reconcile(
        body,
        cluster=fake,
        config=CONFIG,
        locks=reconciling.StatusLocks(),  # type: ignore[arg-type]
    )
    assert outcome is not None
    return outcome


def refresh(fake: FakeCluster, name: str = "ep-test") -> reconciling.Outcome | None:
    return reconciling.refresh(
        "default", name, cluster=fake, config=CONFIG,  # type: ignore[arg-type]
        locks=reconciling.StatusLocks(), trigger="child",
    )  # fmt: skip


def test_a_first_reconcile_applies_every_child_with_the_statefulset_last() -> None:
    body = factories.endpoint(replicas=2, generation=4)
    fake = FakeCluster(body)
    outcome = reconcile(fake, body)
    assert fake.applied == ["Service", "PodDisruptionBudget", "StatefulSet"]
    assert outcome.problem is None
    assert outcome.status["observedGeneration"] == 4
    assert [e.reason for e in outcome.events] == []  # created, not scaled; no ring yet


def test_a_scale_is_one_event_from_the_statefulsets_count() -> None:
    body = factories.endpoint(replicas=2)
    fake = FakeCluster(body)
    reconcile(fake, body)
    fake.objects[api.KIND, "default", "ep-test"]["spec"]["replicas"] = 3
    outcome = reconcile(fake, body)
    assert [(e.reason, e.message) for e in outcome.events if e.reason == "Scaled"] == [
        ("Scaled", "replicas 2 -> 3")
    ]
    assert not [e for e in reconcile(fake, body).events if e.reason == "Scaled"]  # once


def test_a_taken_service_name_stops_before_any_gpu_pod_starts() -> None:
    body = factories.endpoint(replicas=2)
    fake = FakeCluster(body)
    fake.put({"kind": "Service", "metadata": {"name": "ep-test", "namespace": "default"}})
    outcome = reconcile(fake, body)
    assert fake.applied == []
    assert outcome.problem is not None
    assert outcome.problem.reason == status.REASON_CHILD_CONFLICT
    assert not [e for e in outcome.events if e.reason == "Scaled"]
    assert refresh(fake).problem.reason == status.REASON_CHILD_CONFLICT  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", ["Service", "StatefulSet"])
def test_an_orphan_with_the_endpoints_labels_is_adopted(kind: str) -> None:
    body = factories.endpoint(replicas=1)
    fake = FakeCluster(body)
    labels = {api.LABEL_ENDPOINT: "ep-test", api.LABEL_MANAGED_BY: api.MANAGED_BY}
    fake.put({"kind": kind, "metadata": {"name": "ep-test", "namespace": "default",
                                         "labels": labels, "ownerReferences": []}})  # fmt: skip
    outcome = reconcile(fake, body)
    assert outcome.problem is None
    owner = fake.objects[kind, "default", "ep-test"]["metadata"]["ownerReferences"]
    assert owner[0]["uid"] == body["metadata"]["uid"]


def test_a_child_another_controller_owns_is_not_adopted_even_with_our_labels() -> None:
    body = factories.endpoint(replicas=1)
    fake = FakeCluster(body)
    labels = {api.LABEL_ENDPOINT: "ep-test", api.LABEL_MANAGED_BY: api.MANAGED_BY}
    other = [{"kind": "CachedEndpoint", "name": "ep-test", "uid": "older", "controller": True}]
    meta = {"name": "ep-test", "namespace": "default", "labels": labels, "ownerReferences": other}
    fake.put({"kind": "Service", "metadata": meta})
    problem = reconcile(fake, body).problem
    assert problem is not None and problem.reason == status.REASON_CHILD_CONFLICT


def test_only_a_reconcile_stamps_the_generation_and_unchanged_status_is_not_written() -> None:
    body = factories.endpoint(replicas=1, generation=2)
    fake = FakeCluster(body)
    reconcile(fake, body)
    writes = fake.status_writes
    fake.objects[api.KIND, "default", "ep-test"]["metadata"]["generation"] = 3
    outcome = refresh(fake)
    assert outcome is not None and outcome.status["observedGeneration"] == 2
    assert fake.status_writes == writes  # nothing changed that refresh may say
    assert reconcile(fake, body).status["observedGeneration"] == 3


def test_status_counts_the_statefulsets_pods_only() -> None:
    body = factories.endpoint(replicas=2)
    fake = FakeCluster(body)
    reconcile(fake, body)
    sts_uid = fake.objects["StatefulSet", "default", "ep-test"]["metadata"]["uid"]
    for name, owner in (("ep-test-0", sts_uid), ("ep-test-1", sts_uid), ("stray", "someone")):
        pod = factories.pod(name)
        pod["kind"] = "Pod"
        pod["metadata"].update(namespace="default", ownerReferences=[
            {"kind": "StatefulSet", "uid": owner, "controller": True}])  # fmt: skip
        fake.put(pod)
    outcome = refresh(fake)
    assert outcome is not None
    assert (outcome.status["replicas"], outcome.status["readyReplicas"]) == (2, 2)
    assert [m["name"] for m in outcome.status["ring"]["members"]] == ["ep-test-0", "ep-test-1"]


def test_an_endpoint_deleted_meanwhile_is_left_alone() -> None:
    body = factories.endpoint()
    fake = FakeCluster()
    assert reconciling.reconcile(
        body, cluster=fake, config=CONFIG, locks=reconciling.StatusLocks()  # type: ignore[arg-type]
    ) is None  # fmt: skip
    assert fake.applied == [] and refresh(fake) is None


class CountingCluster(FakeCluster):
    """Counts the calls a pod event's refresh makes."""

    def __init__(self, *endpoints: dict[str, Any]) -> None:
        super().__init__(*endpoints)
        self.lists = 0

    def list_all_endpoints(self, namespaces: Any) -> list[dict[str, Any]]:
        self.lists += 1
        return super().list_all_endpoints(namespaces)


def test_a_pod_event_reads_three_things_and_keeps_a_claims_verdict() -> None:
    older = factories.endpoint("ep-a", uid="a", created="2026-01-01T00:00:00Z", endpointId="x")
    newer = factories.endpoint("ep-b", uid="b", created="2026-01-02T00:00:00Z", endpointId="x")
    fake = CountingCluster(older, newer)
    assert reconcile(fake, newer).problem.reason == status.REASON_ENDPOINT_ID_CONFLICT  # type: ignore[union-attr]
    fake.lists = 0
    outcome = refresh(fake, "ep-b")
    assert fake.lists == 0  # no list of the cluster's endpoints per pod event
    assert outcome is not None and outcome.problem is not None
    assert outcome.problem.reason == status.REASON_ENDPOINT_ID_CONFLICT
    assert outcome.status["ring"]["members"] == []  # still no ring for the loser


def test_a_forgotten_endpoints_lock_is_a_new_one() -> None:
    locks = reconciling.StatusLocks()
    first = locks.of("default", "ep")
    assert locks.of("default", "ep") is first
    locks.forget("default", "ep")
    locks.forget("default", "never-seen")  # nothing to drop: no error
    assert locks.of("default", "ep") is not first
