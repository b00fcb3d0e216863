"""`helm install` of the chart into the real API server: every object is accepted, and the
service accounts may do exactly what the operator and the router call (RBAC checked with
`kubectl auth can-i` as each account)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import time
import urllib.request
import uuid

import pytest
import yaml

from kvpin import api
from tests import toolchain
from tests.chart.conftest import CHART
from tests.controlplane import cluster, operators
from tests.controlplane.kube import wait_for

pytestmark = pytest.mark.controlplane

OPERATOR_CALLS = [
    ("list", "cachedendpoints.kvpin.dev"), ("watch", "cachedendpoints.kvpin.dev"),
    ("patch", "cachedendpoints.kvpin.dev"), ("patch", "cachedendpoints.kvpin.dev/status"),
    ("get", "statefulsets.apps"), ("create", "statefulsets.apps"), ("patch", "statefulsets.apps"),
    ("watch", "statefulsets.apps"), ("get", "services"), ("create", "services"),
    ("patch", "services"), ("list", "services"), ("watch", "services"),
    ("get", "poddisruptionbudgets.policy"), ("create", "poddisruptionbudgets.policy"),
    ("delete", "poddisruptionbudgets.policy"), ("list", "poddisruptionbudgets.policy"),
    ("watch", "poddisruptionbudgets.policy"),
    ("list", "pods"), ("watch", "pods"), ("create", "events"),
    ("list", "customresourcedefinitions.apiextensions.k8s.io"), ("list", "namespaces"),
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


def test_the_operator_works_as_the_charts_service_account(
    control_plane: cluster.ControlPlane, tmp_path: pathlib.Path
) -> None:
    """RBAC proven, not assumed: a `kvpin operator` authenticated with a token of the chart's
    ServiceAccount reconciles an endpoint (children applied, status written, drift repaired,
    Events posted) without a single refusal."""
    helm = toolchain.bindir() / "helm"
    subprocess.run(
        [str(helm), "upgrade", "--install", "kvpin", str(CHART), "--namespace", "kvpin-system",
         "--create-namespace", "--kubeconfig", str(control_plane.kubeconfig)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    token = control_plane.kubectl(
        "create", "token", "kvpin-operator", "-n", "kvpin-system"
    ).stdout.strip()
    admin = yaml.safe_load(control_plane.kubeconfig.read_text())
    admin["users"] = [{"name": "operator", "user": {"token": token}}]
    admin["contexts"][0]["context"]["user"] = "operator"
    kubeconfig = tmp_path / "operator.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(admin))
    namespace = f"t-sa-{uuid.uuid4().hex[:6]}"
    control_plane.kubectl("create", "namespace", namespace)
    operator = operators.spawn(control_plane, "-n", namespace, kubeconfig=kubeconfig)
    try:
        body = {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": "ep-sa"},
                "spec": {"model": "m", "replicas": 2, "vramReservation": "1Gi",
                         "engine": {"preset": "sim"}, "gpu": {"count": 0}}}  # fmt: skip
        control_plane.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(body))
        metrics = f"http://127.0.0.1:{operator.metrics_port}/metrics"

        def reconciled() -> bool:
            text = urllib.request.urlopen(metrics, timeout=2).read().decode()
            return 'kvpin_operator_reconciles_total{result="ok"}' in text

        wait_for("a reconcile as the service account", reconciled)
        control_plane.kubectl("delete", "service", "ep-sa", "-n", namespace)
        wait_for("the Service repaired", lambda: control_plane.kubectl(
            "get", "service", "ep-sa", "-n", namespace, check=False).returncode == 0)  # fmt: skip
        time.sleep(2)
        text = urllib.request.urlopen(metrics, timeout=2).read().decode()
        assert "kvpin_operator_errors_total 0.0" in text
        log = operator.log.read_text()
        assert "Forbidden" not in log and " 403" not in log, log[-3000:]
    finally:
        operators.stop(operator)
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false")
