"""Builders of the Kubernetes objects the tests feed to kvpin's pure functions."""

from __future__ import annotations

import copy
from typing import Any

from kvpin import api


def endpoint(
    name: str = "ep-test",
    *,
    namespace: str = "default",
    uid: str = "uid-1",
    created: str = "2026-01-01T00:00:00Z",
    generation: int = 1,
    status: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A CachedEndpoint with a valid sim spec, overridden by keyword arguments."""
    body_spec: dict[str, Any] = {
        "model": "sim-8b",
        "replicas": 2,
        "vramReservation": "1Gi",
        "engine": {"preset": "sim"},
        "gpu": {"count": 0},
    }
    body_spec.update(copy.deepcopy(spec))
    body: dict[str, Any] = {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "generation": generation,
            "creationTimestamp": created,
        },
        "spec": body_spec,
    }
    if status is not None:
        body["status"] = status
    return body


def pod(
    name: str,
    *,
    ip: str | None = "10.0.0.1",
    ready: bool = True,
    port: int = 8000,
    deleting: bool = False,
    endpoint_name: str = "ep-test",
) -> dict[str, Any]:
    """An engine pod as the API server returns it."""
    meta: dict[str, Any] = {"name": name, "labels": {api.LABEL_ENDPOINT: endpoint_name}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]
    }
    if ip:
        status["podIP"] = ip
    return {
        "metadata": meta,
        "spec": {
            "containers": [{"name": "engine", "ports": [{"name": "http", "containerPort": port}]}]
        },
        "status": status,
    }


def statefulset(
    *, update: str = "r1", current: str = "r1", updated: int = 2, generation: int = 1,
    observed: int = 1,
) -> dict[str, Any]:  # fmt: skip
    """A StatefulSet's status as the controller reports it."""
    return {
        "metadata": {"name": "ep-test", "generation": generation},
        "status": {
            "observedGeneration": observed,
            "updateRevision": update,
            "currentRevision": current,
            "updatedReplicas": updated,
        },
    }
