"""The Helm chart, rendered and linted by the real helm, validated against Kubernetes' schemas."""

from __future__ import annotations

import subprocess
from typing import Any

import kubernetes_validate
import pytest

from tests.chart.conftest import CHART, Render

K8S_VERSION = "1.35.0"


def kinds(objects: list[dict[str, Any]]) -> list[str]:
    return sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objects)


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def test_helm_lint_is_clean(helm) -> None:
    out = subprocess.run(
        [str(helm), "lint", "--strict", str(CHART)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr


SETS = {
    "defaults": (),
    "namespaced": ("operator.watchNamespaces={a,b}", "router.watchNamespaces={a}"),
    "autoscaled": ("router.autoscaling.enabled=true", "router.pdb.enabled=false"),
    "auth and monitoring": ("router.authSecret=router-tokens", "serviceMonitor.enabled=true"),
    "dashboard and alerts": ("monitoring.dashboard.enabled=true", "monitoring.rules.enabled=true"),
}


@pytest.mark.parametrize("sets", SETS.values(), ids=SETS.keys())
def test_rendered_objects_are_valid_kubernetes(render: Render, sets) -> None:
    for obj in render(*sets):
        if obj["kind"] in ("ServiceMonitor", "PrometheusRule"):
            continue  # CRDs of the Prometheus operator: no schema in kubernetes-validate
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_defaults(render: Render) -> None:
    objects = render()
    assert kinds(objects) == [
        "ClusterRole/kvpin-operator", "ClusterRole/kvpin-operator-discovery",
        "ClusterRole/kvpin-router", "ClusterRoleBinding/kvpin-operator",
        "ClusterRoleBinding/kvpin-operator-discovery", "ClusterRoleBinding/kvpin-router",
        "Deployment/kvpin-operator", "Deployment/kvpin-router",
        "PodDisruptionBudget/kvpin-router",
        "Service/kvpin-operator-metrics", "Service/kvpin-router", "Service/kvpin-router-replicas",
        "ServiceAccount/kvpin-operator", "ServiceAccount/kvpin-router",
    ]  # fmt: skip
    operator, router = sorted(by_kind(objects, "Deployment"), key=lambda d: d["metadata"]["name"])
    assert operator["spec"]["replicas"] == 1
    assert operator["spec"]["strategy"] == {"type": "Recreate"}
    (container,) = operator["spec"]["template"]["spec"]["containers"]
    assert container["args"][:2] == ["operator", "--all-namespaces"]
    assert "--sim-image=ghcr.io/kvpin/kvpin:0.1.0" in container["args"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    (container,) = router["spec"]["template"]["spec"]["containers"]
    assert router["spec"]["replicas"] == 2
    assert container["args"][:2] == ["router", "--kubernetes"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # each replica relays a key to its owner, found through a headless Service
    assert "--replica=http://$(POD_IP):8080" in container["args"]
    assert "--replicas-dns=kvpin-router-replicas.kvpin-system.svc" in container["args"]
    assert container["env"][0]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    replicas = next(o for o in objects if o["metadata"]["name"] == "kvpin-router-replicas")
    assert replicas["spec"]["clusterIP"] == "None"
    assert replicas["spec"]["selector"] == router["spec"]["selector"]["matchLabels"]
    alone = render("router.relay=false")
    assert "Service/kvpin-router-replicas" not in kinds(alone)
    (container,) = next(d for d in by_kind(alone, "Deployment") if d["metadata"]["name"]
                        == "kvpin-router")["spec"]["template"]["spec"]["containers"]  # fmt: skip
    assert not any(a.startswith("--replica") for a in container["args"])
    # it leaves the Service before it stops, then lets streams in flight finish
    assert container["lifecycle"] == {"preStop": {"sleep": {"seconds": 5}}}
    assert router["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 185


def test_every_pod_is_hardened(render: Render) -> None:
    for deployment in by_kind(render(), "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        for container in pod["containers"]:
            sc = container["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]


def test_rbac_is_least_privilege(render: Render) -> None:
    roles = {r["metadata"]["name"]: r["rules"] for r in by_kind(render(), "ClusterRole")}
    assert roles["kvpin-router"] == [
        {
            "apiGroups": ["kvpin.dev"],
            "resources": ["cachedendpoints"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    granted = {
        (group, resource, verb)
        for rule in roles["kvpin-operator"]
        for group in rule["apiGroups"] for resource in rule["resources"] for verb in rule["verbs"]
    }  # fmt: skip
    assert not any(verb in ("*", "update", "deletecollection") for _, _, verb in granted)
    assert not any(resource in ("secrets", "*") for _, resource, _ in granted)
    assert ("apps", "statefulsets", "delete") not in granted  # owner references collect them
    assert ("policy", "poddisruptionbudgets", "delete") in granted  # dropped below 2 replicas


def test_namespaced_installs_bind_roles_per_namespace(render: Render) -> None:
    objects = render(*SETS["namespaced"])
    # only kopf's discovery (CRDs, namespaces) is bound cluster-wide
    (discovery,) = by_kind(objects, "ClusterRoleBinding")
    assert discovery["roleRef"]["name"] == "kvpin-operator-discovery"
    bindings = sorted(
        (b["metadata"]["namespace"], b["metadata"]["name"]) for b in by_kind(objects, "RoleBinding")
    )
    assert bindings == [("a", "kvpin-operator"), ("a", "kvpin-router"), ("b", "kvpin-operator")]
    operator = next(
        d for d in by_kind(objects, "Deployment") if "operator" in d["metadata"]["name"]
    )
    assert operator["spec"]["template"]["spec"]["containers"][0]["args"][:5] == [
        "operator",
        "-n",
        "a",
        "-n",
        "b",
    ]


def test_autoscaling_and_auth_and_monitoring(render: Render) -> None:
    objects = render(*SETS["autoscaled"])
    (hpa,) = by_kind(objects, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "kvpin-router"
    router = next(d for d in by_kind(objects, "Deployment") if "router" in d["metadata"]["name"])
    assert "replicas" not in router["spec"]
    assert not by_kind(objects, "PodDisruptionBudget")
    objects = render(*SETS["auth and monitoring"])
    router = next(d for d in by_kind(objects, "Deployment") if "router" in d["metadata"]["name"])
    pod = router["spec"]["template"]["spec"]
    assert "--auth-tokens-file=/etc/kvpin/auth/tokens" in pod["containers"][0]["args"]
    assert pod["volumes"] == [{"name": "auth", "secret": {"secretName": "router-tokens"}}]
    assert len(by_kind(objects, "ServiceMonitor")) == 2


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("router.replicas=0", "/router/replicas': minimum"),
        ("image.pullPolicy=Sometimes", "pullPolicy"),
        ("router.replcas=3", "replcas"),
        ("router.drain.gracePeriodSeconds=0", "gracePeriodSeconds"),
        ("operator.watchNamespaces={Not_A_Namespace}", "watchNamespaces"),
    ],
)
def test_the_values_schema_rejects_wrong_values(helm, value: str, message: str) -> None:
    out = subprocess.run(
        [str(helm), "template", "kvpin", str(CHART), "--set", value],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode != 0
    assert "values don't meet the specifications of the schema" in out.stderr
    assert message in out.stderr
