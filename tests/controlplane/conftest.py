"""Fixtures of the control-plane tier: a real API server with fake GPU nodes, the CRD
installed, and the real `kvpin operator` process running against it.

The binaries come from hack/controlplane.sh (see tests/toolchain.py).
"""

from __future__ import annotations

import pathlib
import tempfile
import uuid
from collections.abc import Iterator

import pytest

from tests import figures, toolchain
from tests.controlplane import cluster, kube, operators

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def control_plane() -> Iterator[cluster.ControlPlane]:
    """etcd, API server, controller manager, scheduler and KWOK with two GPU nodes, one CPU
    node, and the CachedEndpoint CRD installed."""
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="kvpin-cp-"))
    with cluster.running(toolchain.bindir(), workdir) as plane:
        plane.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
        plane.kubectl(
            "wait", "--for=condition=Established", "crd/cachedendpoints.kvpin.dev", "--timeout=30s"
        )
        figures.record("control plane started", f"{plane.timings['started']:.1f}s")
        yield plane


@pytest.fixture(scope="session")
def client(control_plane: cluster.ControlPlane) -> kube.Kube:
    """A small typed helper over the kubernetes client, as admin."""
    return kube.Kube(control_plane.kubeconfig)


@pytest.fixture(scope="session")
def operator_process(control_plane: cluster.ControlPlane) -> Iterator[operators.Operator]:
    """The real `kvpin operator`, cluster-wide, with a short resync for the tests."""
    operator = operators.spawn(control_plane, "--all-namespaces", "--resync-seconds", "5")
    yield operator
    operators.stop(operator)


@pytest.fixture
def namespace(client: kube.Kube) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    client.create_namespace(name)
    yield name
    client.delete_namespace(name)
