"""The operator's only caller of the Kubernetes API: apply children, list pods, write status.

I/O. Everything else in kvpin.operator is pure and hands this module finished manifests.
Children are server-side applied with one field manager, so create, update and resync are the
same call, and fields other controllers own (an HPA's replicas on the StatefulSet's scale, say)
are left alone. A child that exists but is not owned by the CachedEndpoint is never touched,
unless it is an orphan carrying the endpoint's labels, which is adopted.
"""

from __future__ import annotations

import fnmatch
import glob
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import kubernetes.client
from kubernetes.client.exceptions import ApiException

from kvpin import api

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"


class ClusterError(Exception):
    """The API server refused or failed a call; usually worth retrying."""


class ChildConflictError(ClusterError):
    """A child's name is taken by an object the CachedEndpoint does not own."""


class ChildRejectedError(ClusterError):
    """The API server refused a child as invalid (400, 422): retrying the same spec cannot
    help; the message names the field (a volume mount naming no volume, say)."""


def owned_by(obj: Mapping[str, Any], owner_uid: str) -> bool:
    """Whether `obj` names the object with `owner_uid` among its owners."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == owner_uid for ref in refs)


def adoptable(obj: Mapping[str, Any], endpoint_name: str) -> bool:
    """Whether `obj` is an orphan of this endpoint, to be adopted rather than refused: it
    carries the labels the operator gives its children and no controller owns it (its
    CachedEndpoint was deleted with `--cascade=orphan` and made again, say, so its pods, and
    their caches, live on under the new object)."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    return (
        labels.get(api.LABEL_ENDPOINT) == endpoint_name
        and labels.get(api.LABEL_MANAGED_BY) == api.MANAGED_BY
        and not any(ref.get("controller") for ref in meta.get("ownerReferences") or [])
    )


def may_apply(
    existing: Mapping[str, Any] | None, manifest: Mapping[str, Any], owner_uid: str
) -> bool:
    """Whether applying `manifest` over `existing` (None: absent) takes nothing from another
    owner."""
    return (
        existing is None
        or owned_by(existing, owner_uid)
        or adoptable(existing, manifest["metadata"]["labels"][api.LABEL_ENDPOINT])
    )


def _json(response: Any) -> dict[str, Any]:
    return json.loads(response.data) if response.data else {}


class Cluster:
    """Typed access to the few resources the operator reads and writes."""

    def __init__(self, client: kubernetes.client.ApiClient) -> None:
        self.core = kubernetes.client.CoreV1Api(client)
        self.apps = kubernetes.client.AppsV1Api(client)
        self.policy = kubernetes.client.PolicyV1Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)
        # kind -> (read, patch, delete), all namespaced and called as f(name, namespace, ...)
        self._kinds: dict[str, tuple[Callable[..., Any], ...]] = {
            "StatefulSet": (
                self.apps.read_namespaced_stateful_set,
                self.apps.patch_namespaced_stateful_set,
                self.apps.delete_namespaced_stateful_set,
            ),
            "Service": (
                self.core.read_namespaced_service,
                self.core.patch_namespaced_service,
                self.core.delete_namespaced_service,
            ),
            "PodDisruptionBudget": (
                self.policy.read_namespaced_pod_disruption_budget,
                self.policy.patch_namespaced_pod_disruption_budget,
                self.policy.delete_namespaced_pod_disruption_budget,
            ),
        }

    def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The child as a dict, or None if it does not exist."""
        read = self._kinds[kind][0]
        try:
            return _json(read(name, namespace, _preload_content=False))
        except ApiException as err:
            if err.status == 404:
                return None
            raise ClusterError(f"reading {kind} {namespace}/{name}: {err.reason}") from err

    def apply_child(self, manifest: Mapping[str, Any], *, owner_uid: str) -> dict[str, Any]:
        """Server-side apply a child the CachedEndpoint owns or adopts; refuse a stranger."""
        kind, meta = manifest["kind"], manifest["metadata"]
        existing = self.read(kind, meta["namespace"], meta["name"])
        if not may_apply(existing, manifest, owner_uid):
            raise ChildConflictError(
                f"{kind} {meta['name']} already exists and is not owned by this CachedEndpoint"
            )
        patch = self._kinds[kind][1]
        try:
            return _json(
                patch(
                    meta["name"],
                    meta["namespace"],
                    dict(manifest),
                    field_manager=api.FIELD_MANAGER,
                    force=True,
                    _content_type=APPLY_PATCH,
                    _preload_content=False,
                )
            )
        except ApiException as err:
            error = ChildRejectedError if err.status in (400, 422) else ClusterError
            raise error(f"applying {kind} {meta['name']}: {_message(err)}") from err

    def delete_child(self, kind: str, namespace: str, name: str, *, owner_uid: str) -> bool:
        """Delete a child the CachedEndpoint owns; True if something was deleted."""
        existing = self.read(kind, namespace, name)
        if existing is None or not owned_by(existing, owner_uid):
            return False
        try:
            self._kinds[kind][2](name, namespace)
        except ApiException as err:
            if err.status == 404:
                return False
            raise ClusterError(f"deleting {kind} {name}: {_message(err)}") from err
        return True

    def list_pods(self, namespace: str, endpoint_name: str) -> list[dict[str, Any]]:
        """The pods labelled as this endpoint's."""
        try:
            response = self.core.list_namespaced_pod(
                namespace,
                label_selector=f"{api.LABEL_ENDPOINT}={endpoint_name}",
                _preload_content=False,
            )
        except ApiException as err:
            raise ClusterError(f"listing pods: {_message(err)}") from err
        return list(_json(response).get("items") or [])

    def read_endpoint(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The CachedEndpoint as stored now, or None once deleted."""
        try:
            return _json(
                self.custom.get_namespaced_custom_object(
                    api.GROUP, api.VERSION, namespace, api.PLURAL, name, _preload_content=False
                )
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise ClusterError(f"reading CachedEndpoint {name}: {_message(err)}") from err

    def list_endpoints(self, namespace: str) -> list[dict[str, Any]]:
        """Every CachedEndpoint of a namespace."""
        try:
            response = self.custom.list_namespaced_custom_object(
                api.GROUP, api.VERSION, namespace, api.PLURAL, _preload_content=False
            )
        except ApiException as err:
            raise ClusterError(f"listing CachedEndpoints: {_message(err)}") from err
        return list(_json(response).get("items") or [])

    def list_all_endpoints(self, namespaces: Sequence[str]) -> list[dict[str, Any]]:
        """Every CachedEndpoint in `namespaces` (empty: the whole cluster; a glob such as
        `team-*` lists the cluster and keeps the namespaces it matches)."""
        if namespaces and not any(glob.has_magic(ns) for ns in namespaces):
            return [body for ns in namespaces for body in self.list_endpoints(ns)]
        try:
            response = self.custom.list_cluster_custom_object(
                api.GROUP, api.VERSION, api.PLURAL, _preload_content=False
            )
        except ApiException as err:
            raise ClusterError(f"listing CachedEndpoints: {_message(err)}") from err
        return [
            body for body in _json(response).get("items") or []
            if not namespaces
            or any(fnmatch.fnmatchcase(body["metadata"]["namespace"], ns) for ns in namespaces)
        ]  # fmt: skip

    def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Replace the fields of `status` we own (merge patch: lists are replaced whole)."""
        try:
            self.custom.patch_namespaced_custom_object_status(
                api.GROUP,
                api.VERSION,
                namespace,
                api.PLURAL,
                name,
                {"status": dict(status)},
                _content_type=MERGE_PATCH,
            )
        except ApiException as err:
            if err.status == 404:
                return  # deleted meanwhile: nothing left to report on
            raise ClusterError(f"writing status of {name}: {_message(err)}") from err


def _message(err: ApiException) -> str:
    try:
        return str(json.loads(err.body).get("message") or err.reason)
    except (TypeError, ValueError):
        return str(err.reason)
