"""Reconcile a CachedEndpoint: plan, apply the children, recompute and write the status.

I/O through `cluster` only; decisions come from the pure `plan` and `status` modules. Two entry
points share one status path: `reconcile` (spec changes, resume, periodic resync) applies the
children first; `refresh` (a pod or StatefulSet changed) only recomputes the status, which is
what makes a pod's readiness reach `status.ring` quickly.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import threading
from collections.abc import Mapping
from typing import Any

from kvpin.operator import cluster as clusters
from kvpin.operator import desired, metrics, plan, spec, status
from kvpin.operator.settings import OperatorConfig

KEPT_VERDICTS = (status.REASON_CHILD_CONFLICT, status.REASON_ENDPOINT_ID_CONFLICT)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a reconcile or refresh did: the status written and the Events it deserves."""

    endpoint: Mapping[str, Any]  # the CachedEndpoint the Events are about
    status: dict[str, Any]
    events: tuple[status.Event, ...]
    problem: status.Problem | None


class StatusLocks:
    """One lock per CachedEndpoint, so a reconcile (which applies), the periodic resync and a
    pod event's refresh of the same endpoint (run in parallel threads) act one after the other,
    each from what the other left, and the Events of one transition are posted once."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: collections.defaultdict[tuple[str, str], threading.Lock] = (
            collections.defaultdict(threading.Lock)
        )

    def of(self, namespace: str, name: str) -> threading.Lock:
        """The lock of one endpoint."""
        with self._guard:
            return self._locks[namespace, name]

    def forget(self, namespace: str, name: str) -> None:
        """The endpoint is gone: drop its lock (a thread holding it keeps its reference)."""
        with self._guard:
            self._locks.pop((namespace, name), None)


def reconcile(
    body: Mapping[str, Any],
    *,
    cluster: clusters.Cluster,
    config: OperatorConfig,
    locks: StatusLocks,
) -> Outcome | None:
    """Converge the children on the spec, then write the status.

    `body` only says which object: the spec applied is the one read now, under the endpoint's
    lock, so a reconcile that started from an older copy (the periodic resync's list, a kopf
    event queued behind a newer one) never applies a stale spec over a newer one.
    """
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    with locks.of(namespace, name):
        fresh = cluster.read_endpoint(namespace, name)
        if (
            fresh is None
            or fresh["metadata"].get("uid") != meta["uid"]
            or fresh["metadata"].get("deletionTimestamp")
        ):
            return None  # deleted (or replaced) meanwhile
        uid = fresh["metadata"]["uid"]
        others = cluster.list_all_endpoints(config.namespaces)
        todo = plan.build_plan(fresh, others, sim_image=config.sim_image)
        problem = todo.problem
        before = cluster.read("StatefulSet", namespace, name) if todo.apply else None
        try:
            for manifest in todo.apply:
                cluster.apply_child(manifest, owner_uid=uid)
            for kind in todo.delete:
                cluster.delete_child(kind, namespace, name, owner_uid=uid)
        except clusters.ChildConflictError as err:
            problem = status.Problem(status.REASON_CHILD_CONFLICT, str(err))
        except clusters.ChildRejectedError as err:
            problem = status.Problem(status.REASON_CHILD_REJECTED, str(err))
        outcome = _write_status(fresh, todo, problem, cluster=cluster, trigger="reconcile")
        scaled = None
        if problem is None and todo.endpoint and clusters.owned_by(before or {}, uid):
            scaled = status.scaling_event(before, todo.endpoint.replicas)
        if scaled is None:
            return outcome
        return dataclasses.replace(outcome, events=(scaled, *outcome.events))


def refresh(
    namespace: str,
    name: str,
    *,
    cluster: clusters.Cluster,
    config: OperatorConfig,
    locks: StatusLocks,
    trigger: str,
) -> Outcome | None:
    """Recompute the status from the pods as they are now; None if the object is gone.

    Three reads (the endpoint, its StatefulSet, its pods), since every pod event of the pool
    comes here: the claims on the endpoint id and on child names are a reconcile's to check,
    and their verdicts are kept until one does.
    """
    with locks.of(namespace, name):
        body = cluster.read_endpoint(namespace, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            metrics.forget_endpoint(namespace, name)
            return None
        todo = plan.build_plan(body, (), sim_image=config.sim_image)
        problem = todo.problem or _kept_verdict(body)
        return _write_status(body, todo, problem, cluster=cluster, trigger=trigger)


def _kept_verdict(body: Mapping[str, Any]) -> status.Problem | None:
    """A ChildNotOwned or EndpointIdConflict verdict stays until a full reconcile, which
    re-checks it, clears it."""
    for condition in (body.get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == status.DEGRADED
            and condition.get("status") == "True"
            and condition.get("reason") in KEPT_VERDICTS
        ):
            return status.Problem(condition["reason"], condition.get("message", ""))
    return None


def _write_status(
    body: Mapping[str, Any],
    todo: plan.Plan,
    problem: status.Problem | None,
    *,
    cluster: clusters.Cluster,
    trigger: str,
) -> Outcome:
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    sts = cluster.read("StatefulSet", namespace, name)
    if sts is not None and not clusters.owned_by(sts, meta["uid"]):
        problem = problem or status.Problem(
            status.REASON_CHILD_CONFLICT,
            f"StatefulSet {name} already exists and is not owned by this CachedEndpoint",
        )
        sts = None
    pods = [
        p for p in (cluster.list_pods(namespace, name) if sts is not None else [])
        if status.made_by(p, sts)
    ]  # fmt: skip
    endpoint = todo.endpoint
    raw_spec = body.get("spec") or {}
    previous = body.get("status") or {}
    # Only a reconcile, which applies the spec, may say it observed the spec's generation.
    observed = (
        meta.get("generation") if trigger == "reconcile" else previous.get("observedGeneration")
    )
    new = status.compute_status(
        generation=int(observed or 0),
        desired_replicas=endpoint.replicas if endpoint else _raw_int(raw_spec.get("replicas")),
        endpoint_id=endpoint.endpoint_id if endpoint else str(raw_spec.get("endpointId") or name),
        selector=desired.format_selector(name),
        vram_reservation=str(raw_spec.get("vramReservation") or ""),
        pods=pods,
        statefulset=sts,
        default_port=endpoint.engine.port if endpoint else 0,
        problem=problem,
        previous=previous,
        now=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        progress_deadline_s=(
            endpoint.progress_deadline_s if endpoint else spec.DEFAULT_PROGRESS_DEADLINE_SECONDS
        ),
    )
    if _owned_fields(previous) != new:
        cluster.patch_status(namespace, name, new)
        metrics.STATUS_WRITES.labels(trigger).inc()
    if (previous.get("ring") or {}).get("version") != new["ring"]["version"]:
        metrics.RING_CHANGES.labels(namespace, name).inc()
    metrics.set_conditions(namespace, name, new.get("conditions") or ())
    return Outcome(body, new, tuple(status.compute_events(previous, new)), problem)


def _owned_fields(previous: Mapping[str, Any]) -> dict[str, Any]:
    keys = (
        "observedGeneration", "endpointId", "replicas", "readyReplicas", "selector",
        "vramReservation", "conditions", "ring",
    )  # fmt: skip
    return {k: previous[k] for k in keys if k in previous}


def _raw_int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
