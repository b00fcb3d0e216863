"""Test-side access to the control plane: the kubernetes client as admin, and waiting."""

from __future__ import annotations

import json
import pathlib
import time
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

import kubernetes.client
import kubernetes.config
from kubernetes.client.exceptions import ApiException

from kvpin import api

T = TypeVar("T")


def http_ok(url: str) -> bool:
    """Whether a GET of `url` answers 200 now."""
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 30.0) -> T:
    """Poll `probe` until it returns something truthy; fail with `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except ApiException as err:
            last = err
        if last and not isinstance(last, ApiException):
            return last
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


class Kube:
    """The few calls the control-plane tests make, returning plain dicts."""

    def __init__(self, kubeconfig: pathlib.Path) -> None:
        self.api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.apps = kubernetes.client.AppsV1Api(self.api)
        self.policy = kubernetes.client.PolicyV1Api(self.api)
        self.custom = kubernetes.client.CustomObjectsApi(self.api)

    @staticmethod
    def _dict(response: Any) -> dict[str, Any]:
        return json.loads(response.data)

    def create_namespace(self, name: str) -> None:
        self.core.create_namespace({"metadata": {"name": name}})

    def delete_namespace(self, name: str) -> None:
        self.core.delete_namespace(name)

    def create_endpoint(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._dict(
            self.custom.create_namespaced_custom_object(
                api.GROUP, api.VERSION, namespace, api.PLURAL, body, _preload_content=False
            )
        )

    def endpoint(self, namespace: str, name: str) -> dict[str, Any]:
        return self._dict(
            self.custom.get_namespaced_custom_object(
                api.GROUP, api.VERSION, namespace, api.PLURAL, name, _preload_content=False
            )
        )

    def patch_endpoint(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            api.GROUP, api.VERSION, namespace, api.PLURAL, name, patch,
            _content_type="application/merge-patch+json",
        )  # fmt: skip

    def delete_endpoint(self, namespace: str, name: str) -> None:
        self.custom.delete_namespaced_custom_object(
            api.GROUP, api.VERSION, namespace, api.PLURAL, name
        )

    def pods(self, namespace: str, endpoint: str) -> list[dict[str, Any]]:
        response = self.core.list_namespaced_pod(
            namespace, label_selector=f"{api.LABEL_ENDPOINT}={endpoint}", _preload_content=False
        )
        return sorted(self._dict(response)["items"], key=lambda p: p["metadata"]["name"])

    def mark_ready(self, namespace: str, pod: str) -> None:
        """Set a pod Ready, as the kubelet does when its readiness probe passes (a pod deleted
        meanwhile has nothing to mark)."""
        ready = [{"type": kind, "status": "True"} for kind in ("Ready", "ContainersReady")]
        try:
            self.core.patch_namespaced_pod_status(
                pod, namespace, {"status": {"conditions": ready}},
                _content_type="application/strategic-merge-patch+json",
            )  # fmt: skip
        except kubernetes.client.ApiException as err:
            if err.status != 404:
                raise

    def statefulset(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._dict(
                self.apps.read_namespaced_stateful_set(name, namespace, _preload_content=False)
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def exists(self, kind: str, namespace: str, name: str) -> bool:
        read = {
            "StatefulSet": self.apps.read_namespaced_stateful_set,
            "Service": self.core.read_namespaced_service,
            "PodDisruptionBudget": self.policy.read_namespaced_pod_disruption_budget,
        }[kind]
        try:
            read(name, namespace, _preload_content=False)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

    def events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        response = self.core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={name}", _preload_content=False
        )
        return list(self._dict(response)["items"])

    def condition(self, namespace: str, name: str, kind: str) -> dict[str, Any]:
        for c in (self.endpoint(namespace, name).get("status") or {}).get("conditions") or []:
            if c["type"] == kind:
                return dict(c)
        return {}
