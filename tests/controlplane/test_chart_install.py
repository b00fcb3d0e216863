"""`helm install` of the chart into the real API server: every object is accepted, and the
service accounts may do exactly what the operator and the router call (RBAC checked with
`kubectl auth can-i` as each account)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests import toolchain
from tests.chart.conftest import CHART
from tests.controlplane import cluster

pytestmark = pytest.mark.controlplane

OPERATOR_CALLS = [
    ("list", "cachedendpoints.kvpin.dev"), ("watch", "cachedendpoints.kvpin.dev"),
    ("patch", "cachedendpoints.kvpin.dev"), ("patch", "cachedendpoints.kvpin.dev/status"),
    ("get", "statefulsets.apps"), ("create", "statefulsets.apps"), ("patch", "statefulsets.apps"),
    ("watch", "statefulsets.apps"), ("get", "services"), ("create", "services"),
    ("patch", "services"), ("get", "poddisruptionbudgets.policy"),
    ("create", "poddisruptionbudgets.policy"), ("delete", "poddisruptionbudgets.policy"),
    ("list", "pods"), ("watch", "pods"), ("create", "events"),
]  # fmt: skip
OPERATOR_DENIED = [
    ("delete", "statefulsets.apps"), ("get", "secrets"), ("delete", "pods"),
    ("update", "cachedendpoints.kvpin.dev"), ("create", "cachedendpoints.kvpin.dev"),
]  # fmt: skip
ROUTER_CALLS = [("get", "cachedendpoints.kvpin.dev"), ("list", "cachedendpoints.kvpin.dev"),
                ("watch", "cachedendpoints.kvpin.dev")]  # fmt: skip
ROUTER_DENIED = [("patch", "cachedendpoints.kvpin.dev"), ("list", "pods"), ("get", "secrets")]


def can(plane: cluster.ControlPlane, account: str, verb: str, resource: str) -> bool:
    out = plane.kubectl(
        "auth", "can-i", verb, resource, "--all-namespaces",
        f"--as=system:serviceaccount:kvpin-system:{account}", check=False,
    )  # fmt: skip
    return out.stdout.strip() == "yes"


def test_helm_install_is_accepted_and_rbac_is_exact(control_plane: cluster.ControlPlane) -> None:
    helm = toolchain.bindir() / "helm"
    subprocess.run(
        [str(helm), "install", "kvpin", str(CHART), "--namespace", "kvpin-system",
         "--create-namespace", "--kubeconfig", str(control_plane.kubeconfig),
         "--set", "router.autoscaling.enabled=true", "--set", "router.authSecret=tokens"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    listed = json.loads(
        control_plane.kubectl(
            "get", "deploy,svc,sa,pdb,hpa", "-n", "kvpin-system", "-o", "json"
        ).stdout
    )
    names = sorted(f"{o['kind']}/{o['metadata']['name']}" for o in listed["items"])
    for expected in ("Deployment/kvpin-operator", "Deployment/kvpin-router",
                     "HorizontalPodAutoscaler/kvpin-router", "Service/kvpin-router",
                     "ServiceAccount/kvpin-operator", "ServiceAccount/kvpin-router"):  # fmt: skip
        assert expected in names
    for verb, resource in OPERATOR_CALLS:
        assert can(control_plane, "kvpin-operator", verb, resource), (verb, resource)
    for verb, resource in OPERATOR_DENIED:
        assert not can(control_plane, "kvpin-operator", verb, resource), (verb, resource)
    for verb, resource in ROUTER_CALLS:
        assert can(control_plane, "kvpin-router", verb, resource), (verb, resource)
    for verb, resource in ROUTER_DENIED:
        assert not can(control_plane, "kvpin-router", verb, resource), (verb, resource)
