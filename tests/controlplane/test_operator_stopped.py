"""What a cluster operator does after `helm uninstall`: delete endpoints, their namespace and the
CRD while no operator runs. Nothing may hang in Terminating (a finalizer would need the operator
to come back). On a control plane of its own, since the CRD is deleted."""

from __future__ import annotations

import pathlib
import tempfile
from collections.abc import Iterator

import pytest
from kubernetes.client.exceptions import ApiException

from tests import toolchain
from tests.controlplane import cluster, kube, operators
from tests.controlplane.test_operator import endpoint, wait_ring

pytestmark = pytest.mark.controlplane
ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def plane() -> Iterator[cluster.ControlPlane]:
    with cluster.running(toolchain.bindir(), pathlib.Path(tempfile.mkdtemp())) as started:
        started.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
        started.kubectl(
            "wait", "--for=condition=Established", "crd/cachedendpoints.kvpin.dev", "--timeout=30s"
        )
        yield started


def gone(read: object) -> bool:
    try:
        read()  # type: ignore[operator]
    except ApiException as err:
        return err.status == 404
    return False


def test_endpoints_their_namespace_and_the_crd_go_with_the_operator_stopped(
    plane: cluster.ControlPlane,
) -> None:
    client = kube.Kube(plane.kubeconfig)
    for ns in ("team-a", "team-b", "team-c"):
        client.create_namespace(ns)
    operator = operators.spawn(plane, "--all-namespaces")
    try:
        for ns in ("team-a", "team-b", "team-c"):
            client.create_endpoint(ns, endpoint("ep", replicas=1, endpointId=ns))
            wait_ring(client, ns, "ep", ["ep-0"])
    finally:
        operators.stop(operator)

    # One endpoint: deleted at once, its children collected by their owner references.
    plane.kubectl("delete", "-n", "team-a", "cep/ep", "--timeout=20s")
    kube.wait_for("team-a's StatefulSet collected", lambda: client.statefulset("team-a", "ep")
                  is None, 120)  # fmt: skip
    # A namespace: the namespace controller empties it and it goes.
    client.delete_namespace("team-b")
    kube.wait_for(
        "namespace team-b gone", lambda: gone(lambda: client.core.read_namespace("team-b")), 90
    )
    # The CRD, with an endpoint still stored: its objects go with it.
    plane.kubectl("delete", "crd", "cachedendpoints.kvpin.dev", "--timeout=60s")
    kube.wait_for(
        "the CRD gone",
        lambda: plane.kubectl("get", "crd", "cachedendpoints.kvpin.dev", check=False).returncode,
        60,
    )
    kube.wait_for("team-c's StatefulSet collected", lambda: client.statefulset("team-c", "ep")
                  is None, 120)  # fmt: skip
