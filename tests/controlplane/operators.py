"""Real `kvpin operator` processes for the control-plane tests."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
import sys
import time

from tests.controlplane import cluster, kube


@dataclasses.dataclass(frozen=True)
class Operator:
    """A running operator process and where it serves."""

    proc: subprocess.Popen[bytes]
    liveness_port: int
    metrics_port: int
    log: pathlib.Path


def spawn(
    plane: cluster.ControlPlane, *args: str, kubeconfig: pathlib.Path | None = None
) -> Operator:
    """Start a real `kvpin operator` process and wait until its liveness endpoint answers
    (as admin, or as whoever `kubeconfig` names)."""
    kvpin = pathlib.Path(sys.executable).parent / "kvpin"
    liveness, metrics = cluster.free_port(), cluster.free_port()
    log = plane.logs / f"operator-{liveness}.log"
    proc = subprocess.Popen(
        [str(kvpin), "operator", *args, "--host", "127.0.0.1",
         "--liveness-port", str(liveness), "--metrics-port", str(metrics),
         "--sim-image", "kvpin:test"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "KUBECONFIG": str(kubeconfig or plane.kubeconfig)},
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not kube.http_ok(f"http://127.0.0.1:{liveness}/healthz"):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"kvpin operator did not start:\n{log.read_text()[-4000:]}")
        time.sleep(0.2)
    return Operator(proc, liveness, metrics, log)


def stop(operator: Operator) -> None:
    """SIGTERM, as Kubernetes does, then wait for kopf's graceful exit."""
    operator.proc.terminate()
    try:
        operator.proc.wait(15)
    except subprocess.TimeoutExpired:
        operator.proc.kill()
        operator.proc.wait()
