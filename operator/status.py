"""Pods and the StatefulSet -> the CachedEndpoint's status, and the Events its changes deserve.

Pure. The operator's handlers feed this the objects they listed and write back what it
returns; everything that decides a condition, a ring member or an Event reason is here, so it
is tested with plain dicts.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kvpin import api

# Condition types and reasons, and Event reasons: the vocabulary users see in kubectl.
READY, PROGRESSING, DEGRADED = "Ready", "Progressing", "Degraded"
AVAILABLE = "Available"  # at least one member serving (Ready: all of them)
REASON_SOME_AVAILABLE = "MinimumReplicasAvailable"
REASON_NONE_AVAILABLE = "NoReplicasAvailable"
REASON_DEADLINE = "ProgressDeadlineExceeded"
# A pod stuck in one of these says why in its own status: named in Degraded.
POD_FAILURES = ("Unschedulable", "ImagePullBackOff", "ErrImagePull", "CrashLoopBackOff",
                "CreateContainerConfigError", "CreateContainerError", "InvalidImageName",
                "RunContainerError")  # fmt: skip
REASON_ALL_READY = "AllReplicasReady"
REASON_NOT_READY = "ReplicasNotReady"
REASON_SCALED_TO_ZERO = "ScaledToZero"
REASON_ROLLING = "RollingUpdate"
REASON_SCALING = "Scaling"
REASON_COMPLETE = "Complete"
REASON_AS_EXPECTED = "AsExpected"
REASON_INVALID_SPEC = "InvalidSpec"
REASON_ENDPOINT_ID_CONFLICT = "EndpointIdConflict"
REASON_CHILD_CONFLICT = "ChildNotOwned"
REASON_CHILD_REJECTED = "ChildRejected"
REASON_PENDING = "SpecNotObserved"
EVENT_RING_CHANGED = "RingChanged"
EVENT_SCALED = "Scaled"
EVENT_ROLLOUT_STARTED = "RolloutStarted"
EVENT_ROLLOUT_FINISHED = "RolloutFinished"
EVENT_DEGRADED = "Degraded"
EVENT_RECOVERED = "Recovered"


@dataclasses.dataclass(frozen=True)
class Problem:
    """Why a CachedEndpoint cannot be reconciled: becomes `Degraded=True`."""

    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class Event:
    """A Kubernetes Event to post on the CachedEndpoint."""

    type: str  # Normal or Warning
    reason: str
    message: str


def made_by(pod: Mapping[str, Any], statefulset: Mapping[str, Any] | None) -> bool:
    """Whether the endpoint's StatefulSet made `pod`: a pod that only carries the endpoint's
    label (made by hand, or by something else) never joins the ring."""
    uid = ((statefulset or {}).get("metadata") or {}).get("uid")
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return (
        any(r.get("kind") == "StatefulSet" and r.get("uid") == uid for r in refs) if uid else False
    )


def is_pod_ready(pod: Mapping[str, Any]) -> bool:
    """Ready condition True, an IP assigned, and not on its way out."""
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if not status.get("podIP"):
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def pod_port(pod: Mapping[str, Any], default: int) -> int:
    """The engine port the pod itself declares (it may predate a port change)."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == "http" and port.get("containerPort"):
                return int(port["containerPort"])
    return default


def _host_port(ip: str, port: int) -> str:
    """`ip:port`, an IPv6 address in brackets (RFC 3986), so `http://` + it is a URL."""
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def compute_ring(pods: Iterable[Mapping[str, Any]], *, default_port: int) -> api.Ring:
    """One member per Ready pod: its stable name and `ip:port`."""
    return api.Ring.of(
        api.RingMember(
            name=pod["metadata"]["name"],
            address=_host_port(pod["status"]["podIP"], pod_port(pod, default_port)),
        )
        for pod in pods
        if is_pod_ready(pod)
    )


def compute_status(
    *,
    generation: int,
    desired_replicas: int,
    endpoint_id: str,
    selector: str,
    vram_reservation: str,
    pods: Sequence[Mapping[str, Any]],
    statefulset: Mapping[str, Any] | None,
    default_port: int,
    problem: Problem | None,
    previous: Mapping[str, Any],
    now: str,
    progress_deadline_s: int = 1800,
) -> dict[str, Any]:
    """The whole `status` document; condition times kept from `previous` when unchanged.

    With a problem, the ring keeps whatever Ready pods exist (they still serve), except for an
    endpoint-id conflict, where publishing would let two objects claim one id in the router.
    Without one, a pod the scheduler or the kubelet cannot start is the problem, named. A
    rollout or scale still progressing `progress_deadline_s` after it began says so.
    """
    ring = compute_ring(pods, default_port=default_port)
    if problem and problem.reason == REASON_ENDPOINT_ID_CONFLICT:
        ring = api.Ring()
    ready = len(ring.members)
    old = {c.get("type"): c for c in previous.get("conditions") or []}
    progressing = _deadline(
        _progressing_condition(statefulset, ready, desired_replicas, pods),
        old.get(PROGRESSING), now, progress_deadline_s,
    )  # fmt: skip
    conditions = [
        _ready_condition(ready, desired_replicas),
        _available_condition(ready),
        progressing,
        _degraded_condition(problem or pod_failure(pods)),
    ]
    return {
        "observedGeneration": generation,
        "endpointId": endpoint_id,
        # What exists, as a StatefulSet's status.replicas means (the HPA reads it through the
        # scale subresource); the desired count is the spec's.
        "replicas": sum(1 for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")),
        "readyReplicas": ready,
        "selector": selector,
        "vramReservation": vram_reservation,
        "conditions": [_with_time(c, old.get(c["type"]), now, generation) for c in conditions],
        "ring": ring.to_status(),
    }


def _ready_condition(ready: int, desired: int) -> dict[str, str]:
    if desired == 0:
        return _condition(READY, False, REASON_SCALED_TO_ZERO, "the endpoint has no replicas")
    if ready >= desired:
        return _condition(READY, True, REASON_ALL_READY, f"{ready}/{desired} replicas ready")
    return _condition(READY, False, REASON_NOT_READY, f"{ready}/{desired} replicas ready")


def _progressing_condition(
    sts: Mapping[str, Any] | None,
    ready: int,
    desired: int,
    pods: Sequence[Mapping[str, Any]],
) -> dict[str, str]:
    sts_status = (sts or {}).get("status") or {}
    update, current = sts_status.get("updateRevision"), sts_status.get("currentRevision")
    if sts is None:
        return _condition(PROGRESSING, True, REASON_SCALING, "creating the StatefulSet")
    generation = (sts.get("metadata") or {}).get("generation")
    observed = sts_status.get("observedGeneration")
    if generation is not None and (observed is None or observed < generation):
        return _condition(
            PROGRESSING, True, REASON_PENDING,
            "the StatefulSet controller has not acted on the latest spec yet",
        )  # fmt: skip
    if update and current and update != current:
        updated = sts_status.get("updatedReplicas", 0)
        return _condition(
            PROGRESSING, True, REASON_ROLLING, f"{updated}/{desired} pods on the new revision"
        )
    if len(pods) != desired or ready != desired:
        return _condition(
            PROGRESSING, True, REASON_SCALING, f"{ready}/{desired} ready, {len(pods)} pods exist"
        )
    return _condition(PROGRESSING, False, REASON_COMPLETE, "the pool matches the spec")


def _available_condition(ready: int) -> dict[str, str]:
    if ready:
        return _condition(AVAILABLE, True, REASON_SOME_AVAILABLE, f"{ready} serving")
    return _condition(AVAILABLE, False, REASON_NONE_AVAILABLE, "no pod is serving")


def pod_failure(pods: Iterable[Mapping[str, Any]]) -> Problem | None:
    """The first pod the scheduler or the kubelet cannot start, with their own words."""
    for pod in sorted(pods, key=lambda p: p.get("metadata", {}).get("name", "")):
        name = pod.get("metadata", {}).get("name", "?")
        st = pod.get("status") or {}
        for c in st.get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable":
                return Problem("Unschedulable", f"pod {name}: {c.get('message', '')}".strip())
        for cs in [*(st.get("initContainerStatuses") or []), *(st.get("containerStatuses") or [])]:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in POD_FAILURES:
                where = f"pod {name}, container {cs.get('name')}"
                return Problem(waiting["reason"], f"{where}: {waiting.get('message', '')}".strip())
    return None


def _deadline(
    condition: dict[str, str], old: Mapping[str, Any] | None, now: str, deadline_s: int
) -> dict[str, str]:
    """Progressing turns False with ProgressDeadlineExceeded once the same progress has been
    under way for `deadline_s` (as a Deployment's does), until it completes or changes."""
    if condition["status"] != "True" or not old:
        return condition
    if old.get("reason") == REASON_DEADLINE and old.get("status") == "False":
        return _condition(PROGRESSING, False, REASON_DEADLINE, old.get("message", ""))
    started = old.get("lastTransitionTime")
    if old.get("status") != "True" or not started:
        return condition
    if _seconds(now) - _seconds(started) <= deadline_s:
        return condition
    return _condition(PROGRESSING, False, REASON_DEADLINE,
                      f"no completion in {deadline_s}s: {condition['message']}")  # fmt: skip


def _seconds(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _degraded_condition(problem: Problem | None) -> dict[str, str]:
    if problem is None:
        return _condition(DEGRADED, False, REASON_AS_EXPECTED, "reconciled")
    return _condition(DEGRADED, True, problem.reason, problem.message)


def _condition(kind: str, status: bool, reason: str, message: str) -> dict[str, str]:
    return {
        "type": kind,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
    }


def _with_time(
    condition: dict[str, Any], old: Mapping[str, Any] | None, now: str, generation: int
) -> dict[str, Any]:
    same = old is not None and old.get("status") == condition["status"]
    when = old.get("lastTransitionTime") if same and old else None
    return {**condition, "observedGeneration": generation, "lastTransitionTime": when or now}


def scaling_event(before: Mapping[str, Any] | None, desired: int) -> Event | None:
    """The Event of a reconcile that changes the StatefulSet's replicas from `before`'s."""
    replicas = ((before or {}).get("spec") or {}).get("replicas")
    if before is None or replicas is None or replicas == desired:
        return None
    return Event("Normal", EVENT_SCALED, f"replicas {replicas} -> {desired}")


def compute_events(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Event]:
    """The Events that the step from `old` to `new` status deserves (none when equal)."""
    events: list[Event] = []
    old_ring, new_ring = old.get("ring") or {}, new.get("ring") or {}
    ring_changed = old_ring.get("version") != new_ring.get("version")
    if ring_changed and (old_ring.get("size") or new_ring.get("size")):  # not empty -> empty
        names = ", ".join(m["name"] for m in new_ring.get("members", [])) or "none"
        events.append(
            Event(
                "Normal",
                EVENT_RING_CHANGED,
                f"ring {new_ring.get('version')}: {new_ring.get('size', 0)} members ({names})",
            )
        )
    was, now = _find(old, PROGRESSING), _find(new, PROGRESSING)
    rolling_before = was.get("reason") == REASON_ROLLING and was.get("status") == "True"
    rolling_now = now.get("reason") == REASON_ROLLING and now.get("status") == "True"
    if rolling_now and not rolling_before:
        events.append(Event("Normal", EVENT_ROLLOUT_STARTED, now.get("message", "")))
    if rolling_before and not rolling_now:
        events.append(Event("Normal", EVENT_ROLLOUT_FINISHED, "all pods on the new revision"))
    was, now = _find(old, DEGRADED), _find(new, DEGRADED)
    if now.get("status") == "True" and (
        was.get("status") != "True" or was.get("reason") != now.get("reason")
    ):
        events.append(Event("Warning", EVENT_DEGRADED, f"{now['reason']}: {now['message']}"))
    if was.get("status") == "True" and now.get("status") != "True":
        events.append(Event("Normal", EVENT_RECOVERED, "the endpoint reconciles again"))
    return events


def _find(status: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    for condition in status.get("conditions") or []:
        if condition.get("type") == kind:
            return condition
    return {}
