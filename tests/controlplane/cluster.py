"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and KWOK (fake nodes and pod lifecycle), from binaries built by
hack/controlplane.sh.

Used by the session fixture in tests/controlplane/conftest.py and by hand:

    hack/controlplane.sh up        # prints KUBECONFIG=...; Ctrl-C tears it down

Self-contained (standard library and PyYAML only) so that it runs as a plain script without
importing the repository's packages. Everything listens on 127.0.0.1 on free ports, lives in
one temporary folder, and is stopped with its processes on exit, also on failure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from typing import Any

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
READY_BY_PROBE = "kvpin.test/ready-by-probe"  # a pod annotation: see probed_ready_stages
GPU_PRODUCT = "NVIDIA-A100-SXM4-80GB"


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _openssl(*args: str, cwd: pathlib.Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def probed_ready_stages(stages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """KWOK's stages, with pods annotated READY_BY_PROBE started un-Ready.

    KWOK's pod-ready stage gives a pod its IP and makes it Ready at once, as if its readiness
    probe passed the moment it was scheduled. A test that runs a real engine for such a pod
    (tests/controlplane/test_pool_lifecycle.py) plays the kubelet's probe instead: the pod
    gets its IP un-Ready, and the test marks it Ready once its engine answers. Without this,
    a rollout replaced every pod before any new engine listened, and routers sent users to
    addresses where nothing did.
    """
    out = []
    for stage in stages:
        if stage.get("metadata", {}).get("name") != "pod-ready":
            out.append(stage)
            continue
        key = f'.metadata.annotations["{READY_BY_PROBE}"]'
        held = json.loads(json.dumps(stage))
        held["metadata"]["name"] = "pod-ready-by-probe"
        held["spec"]["selector"]["matchExpressions"].append({"key": key, "operator": "Exists"})
        template = held["spec"]["next"]["statusTemplate"]
        for kind in ("Ready", "ContainersReady"):
            template, n = re.subn(
                rf'status: "True"(\s+)type: {kind}\n', rf'status: "False"\1type: {kind}\n', template
            )
            assert n == 1, f"KWOK's pod-ready stage changed: no {kind} condition"
        held["spec"]["next"]["statusTemplate"] = template.replace("ready: true", "ready: false")
        stage["spec"]["selector"]["matchExpressions"].append(
            {"key": key, "operator": "DoesNotExist"}
        )
        out += [stage, held]
    return out


def write_certificates(pki: pathlib.Path) -> None:
    """A CA, the API server's serving cert, an admin client cert, a service-account key."""
    pki.mkdir(parents=True)
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-subj",
        "/CN=kvpin-test-ca",
        cwd=pki,
    )
    (pki / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,"
        "DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
        "extendedKeyUsage=serverAuth\n"
    )
    (pki / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name, subject, ext in (
        ("server", "/CN=kube-apiserver", "server.ext"),
        ("admin", "/O=system:masters/CN=kvpin-admin", "client.ext"),
    ):
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            "-subj",
            subject,
            cwd=pki,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            f"{name}.crt",
            "-extfile",
            ext,
            cwd=pki,
        )
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)  # fmt: skip


def write_kubeconfig(path: pathlib.Path, server: str, pki: pathlib.Path) -> None:
    """An admin kubeconfig (group system:masters) for the API server."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kvpin-test", "cluster": {
            "server": server, "certificate-authority": str(pki / "ca.crt")}}],
        "users": [{"name": "admin", "user": {
            "client-certificate": str(pki / "admin.crt"), "client-key": str(pki / "admin.key")}}],
        "contexts": [{"name": "kvpin-test", "context": {"cluster": "kvpin-test", "user": "admin"}}],
        "current-context": "kvpin-test",
    }  # fmt: skip
    path.write_text(yaml.safe_dump(config))


def gpu_node(name: str, index: int, *, gpus: int = 8) -> dict[str, Any]:
    """A fake GPU node for KWOK: GPU capacity, GFD labels, the usual GPU taint."""
    node = cpu_node(name, index)
    node["metadata"]["labels"].update({
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": GPU_PRODUCT,
        "nvidia.com/gpu.memory": "81920",
        "nvidia.com/gpu.count": str(gpus),
    })  # fmt: skip
    node["spec"]["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    for field in ("capacity", "allocatable"):
        node["status"][field]["nvidia.com/gpu"] = str(gpus)
    return node


def cpu_node(name: str, index: int) -> dict[str, Any]:
    """A fake node without GPUs. Its pod CIDR is on loopback, so pod IPs can be bound here."""
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
        },
        "spec": {"podCIDR": f"127.1.{index}.0/24", "podCIDRs": [f"127.1.{index}.0/24"]},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux",
                         "kubeletVersion": "fake", "kubeProxyVersion": "fake"},
            "addresses": [{"type": "InternalIP", "address": f"127.0.{index}.1"}],
        },
    }  # fmt: skip


class ControlPlane:
    """The processes of one control plane and where to reach it."""

    def __init__(self, bindir: pathlib.Path, workdir: pathlib.Path) -> None:
        self.bindir = bindir
        self.workdir = workdir
        self.pki = workdir / "pki"
        self.kubeconfig = workdir / "kubeconfig"
        self.logs = workdir / "logs"
        self.apiserver_port = free_port()
        self.server = f"https://127.0.0.1:{self.apiserver_port}"
        self.processes: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.timings: dict[str, float] = {}

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, *, gpu_nodes: int = 2, cpu_nodes: int = 1) -> None:
        """Start every component, wait for health, register the fake nodes."""
        t0 = time.monotonic()
        self.logs.mkdir(parents=True, exist_ok=True)
        write_certificates(self.pki)
        write_kubeconfig(self.kubeconfig, self.server, self.pki)
        self._start_etcd()
        self._start_apiserver()
        self._wait_ready(120)
        self.timings["apiserver_ready"] = time.monotonic() - t0
        common = ["--kubeconfig", str(self.kubeconfig), "--leader-elect=false",
                  "--bind-address=127.0.0.1", "--secure-port=0"]  # fmt: skip
        self._spawn("kube-controller-manager", [
            *common,
            f"--service-account-private-key-file={self.pki / 'sa.key'}",
            f"--root-ca-file={self.pki / 'ca.crt'}",
            "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller",
        ])  # fmt: skip
        self._spawn("kube-scheduler", common)
        self._start_kwok()
        for i in range(gpu_nodes):
            self.kubectl_apply(gpu_node(f"gpu-node-{i}", i + 1))
        for i in range(cpu_nodes):
            self.kubectl_apply(cpu_node(f"cpu-node-{i}", 100 + i))
        self._wait_default_service_account(60)
        self.timings["started"] = time.monotonic() - t0

    def stop(self) -> None:
        """Stop every process, newest first, each before the next (the API server stops
        quickly only while etcd is still there)."""
        for _name, proc in reversed(self.processes):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.processes.clear()

    # -- components -----------------------------------------------------------------------

    def _spawn(self, binary: str, args: Sequence[str], name: str | None = None) -> None:
        log = (self.logs / f"{name or binary}.log").open("wb")
        proc = subprocess.Popen(
            [str(self.bindir / binary), *args], stdout=log, stderr=subprocess.STDOUT,
            cwd=self.workdir, start_new_session=True,
        )  # fmt: skip
        self.processes.append((name or binary, proc))

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        data = self.workdir / "etcd"
        shm = pathlib.Path("/dev/shm")
        if shm.is_dir() and os.access(shm, os.W_OK):  # tmpfs: no disk waits
            data = pathlib.Path(tempfile.mkdtemp(prefix="kvpin-etcd-", dir=shm))
            self._etcd_tmp = data
        self._spawn("etcd", [
            f"--data-dir={data}", f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=default=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync", "--log-level=warn",
        ])  # fmt: skip

    def _start_apiserver(self) -> None:
        pki = self.pki
        self._spawn("kube-apiserver", [
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            f"--tls-cert-file={pki / 'server.crt'}", f"--tls-private-key-file={pki / 'server.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
        ])  # fmt: skip

    def _start_kwok(self) -> None:
        stages = self.bindir.parent / "kwok-stages"
        config = self.workdir / "kwok.yaml"
        documents = [{
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokConfiguration",
            # Stated explicitly: kwok leaves these at zero when a configuration is given.
            "options": {
                "podPlayStageParallelism": 4, "nodePlayStageParallelism": 4,
                "nodeLeaseParallelism": 4, "podsOnNodeSyncParallelism": 1,
                "nodeLeaseDurationSeconds": 40, "enablePodsOnNodeSyncListPager": True,
            },
        }]  # fmt: skip
        documents += probed_ready_stages(
            [yaml.safe_load(p.read_text()) for p in sorted(stages.glob("*.yaml"))]
        )
        config.write_text(yaml.safe_dump_all(documents))
        self._spawn("kwok", [
            f"--kubeconfig={self.kubeconfig}", f"--config={config}",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
            "--cidr=127.1.0.0/16", "--node-ip=127.0.0.1",
            f"--server-address=127.0.0.1:{free_port()}",
        ])  # fmt: skip

    # -- waiting --------------------------------------------------------------------------

    def _ssl(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        context.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return context

    def get(self, path: str) -> Any:
        """GET a path of the API server as admin; the decoded JSON."""
        with urllib.request.urlopen(self.server + path, context=self._ssl(), timeout=5) as r:
            return json.loads(r.read())

    def _check_alive(self) -> None:
        for name, proc in self.processes:
            if proc.poll() is not None:
                tail = (self.logs / f"{name}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{tail}")

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            with (
                contextlib.suppress(OSError, ValueError),
                urllib.request.urlopen(
                    self.server + "/readyz", context=self._ssl(), timeout=2
                ) as r,
            ):
                if r.status == 200:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError("kube-apiserver did not become ready")
            time.sleep(0.2)

    def _wait_default_service_account(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            with contextlib.suppress(OSError, ValueError):
                self.get("/api/v1/namespaces/default/serviceaccounts/default")
                return
            time.sleep(0.2)
        raise TimeoutError("the controller manager did not create the default ServiceAccount")

    # -- kubectl --------------------------------------------------------------------------

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl against this control plane."""
        return subprocess.run(
            [str(self.bindir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=input, capture_output=True, text=True, check=check, timeout=60,
        )  # fmt: skip

    def kubectl_apply(self, obj: dict[str, Any]) -> None:
        """Create or update an object from a dict."""
        self.kubectl("apply", "-f", "-", input=json.dumps(obj))

    def close(self) -> None:
        """Stop and remove the temporary files."""
        self.stop()
        tmp = getattr(self, "_etcd_tmp", None)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def running(bindir: pathlib.Path, workdir: pathlib.Path | None = None) -> Iterator[ControlPlane]:
    """A started control plane, stopped on exit."""
    owned = workdir is None
    workdir = workdir or pathlib.Path(tempfile.mkdtemp(prefix="kvpin-cp-"))
    plane = ControlPlane(bindir, workdir)
    try:
        plane.start()
        yield plane
    finally:
        plane.close()
        if owned and not os.environ.get("KVPIN_KEEP_CONTROLPLANE"):
            shutil.rmtree(workdir, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> None:
    """`hack/controlplane.sh up`: start, print the kubeconfig, wait for Ctrl-C."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bindir", type=pathlib.Path, required=True)
    args = parser.parse_args(argv)
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="kvpin-cp-"))
    with running(args.bindir, workdir) as plane:
        print(f"control plane up in {plane.timings['started']:.1f}s; logs in {plane.logs}")
        print(f"export KUBECONFIG={plane.kubeconfig}")
        print(f"alias kubectl={plane.bindir / 'kubectl'}   # the built one, in version skew")
        print(f"kubectl apply --server-side -f {ROOT / 'crds'}")
        print("Ctrl-C stops it and removes its files.")
        sys.stdout.flush()
        signals = {signal.SIGINT, signal.SIGTERM}
        signal.pthread_sigmask(signal.SIG_BLOCK, signals)
        signal.sigwait(signals)


if __name__ == "__main__":
    main()
