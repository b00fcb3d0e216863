"""The CRD on a real API server: examples apply with kubectl, nonsense is refused with the
schema's and the CEL rules' own messages."""

from __future__ import annotations

import json

import pytest
import yaml

from tests import crd
from tests.controlplane import cluster

pytestmark = pytest.mark.controlplane


@pytest.mark.parametrize("path", crd.EXAMPLES, ids=lambda p: p.name)
def test_each_example_applies_with_kubectl(
    control_plane: cluster.ControlPlane, path, namespace: str
) -> None:
    control_plane.kubectl("apply", "-n", namespace, "--dry-run=server", "-f", str(path))


def test_defaults_are_applied_by_the_api_server(
    control_plane: cluster.ControlPlane, namespace: str
) -> None:
    minimal = {"apiVersion": "kvpin.dev/v1alpha1", "kind": "CachedEndpoint",
               "metadata": {"name": "ep-min"}, "spec": {"model": "m", "vramReservation": "8Gi"}}  # fmt: skip
    out = control_plane.kubectl(
        "create", "-n", namespace, "--dry-run=server", "-o", "json", "-f", "-",
        input=json.dumps(minimal),
    )  # fmt: skip
    spec = json.loads(out.stdout)["spec"]
    assert spec["replicas"] == 1
    assert spec["engine"] == {"preset": "vllm", "port": 8000, "healthPath": "/health"}
    assert spec["gpu"] == {"count": 1, "resourceName": "nvidia.com/gpu"}
    assert spec["routing"] == {
        "key": "prefix", "loadFactor": 2, "virtualNodes": 160, "sessionHeader": "X-Session-ID",
        "prefixChars": 2048, "cacheSalt": "none", "prefillTokensPerSecond": 10000,
        "moveMargin": 5, "freshBelow": 0.3, "keepHomes": True,
        "warmup": {"heads": 8, "timeoutSeconds": 30, "concurrency": 2},
    }  # fmt: skip
    assert spec["drain"] == {"leaveRingSeconds": 10, "gracePeriodSeconds": 180}


INVALID = [
    ({"replicas": -1}, "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"),
    ({"vramReservation": "forty"}, "vramReservation must be a positive quantity such as 40Gi"),
    ({"vramReservation": "0"}, "vramReservation must be a positive quantity such as 40Gi"),
    ({"engine": {"preset": "tgi"}}, 'Unsupported value: "tgi"'),
    ({"endpointId": "EP_Support"}, "endpointId must be a DNS label"),
    ({"engine": {"preset": "custom"}}, "the custom engine preset needs spec.engine.image"),
    ({"routing": {"warmup": {"prompts": [{"tools": []}]}}}, "messages: Required value"),
    ({"drain": {"gracePeriodSeconds": 0}}, "gracePeriodSeconds in body should be greater than or equal to 1"),
    ({"engine": {"preset": "vllm"}, "gpu": {"count": 0}}, "the vllm and sglang engines need at least one GPU"),
    ({"engine": {"preset": "sglang"}}, "the sglang engine sizes its cache as a fraction of GPU memory"),
    ({"routing": {"loadFactor": 0.5}}, "loadFactor in body should be greater than or equal to 1"),
    ({"weightsMemory": "16 GB"}, "weightsMemory must be a positive quantity such as 16Gi"),
]  # fmt: skip


@pytest.mark.parametrize(("override", "message"), INVALID, ids=[m for _, m in INVALID])
def test_invalid_endpoints_are_refused_with_a_clear_message(
    control_plane: cluster.ControlPlane, namespace: str, override: dict, message: str
) -> None:
    body = {"apiVersion": "kvpin.dev/v1alpha1", "kind": "CachedEndpoint",
            "metadata": {"name": "ep-bad"},
            "spec": {"model": "m", "vramReservation": "8Gi", **override}}  # fmt: skip
    out = control_plane.kubectl(
        "apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(body), check=False
    )
    assert out.returncode != 0
    assert message in out.stderr


def test_long_names_are_refused(control_plane: cluster.ControlPlane, namespace: str) -> None:
    body = {"apiVersion": "kvpin.dev/v1alpha1", "kind": "CachedEndpoint",
            "metadata": {"name": "e" * 53}, "spec": {"model": "m", "vramReservation": "8Gi"}}  # fmt: skip
    out = control_plane.kubectl(
        "apply", "-n", namespace, "-f", "-", input=json.dumps(body), check=False
    )
    assert "metadata.name must be at most 52 characters" in out.stderr
