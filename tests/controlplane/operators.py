"""Real `kvpin operator` processes for the control-plane tests."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
import time

from tests.controlplane import cluster, kube


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn(plane: cluster.ControlPlane, *args: str) -> subprocess.Popen[bytes]:
    """Start a real `kvpin operator` process and wait until its liveness endpoint answers."""
    kvpin = pathlib.Path(sys.executable).parent / "kvpin"
    liveness = _free_port()
    log = (plane.logs / f"operator-{liveness}.log").open("wb")
    proc = subprocess.Popen(
        [str(kvpin), "operator", *args, "--host", "127.0.0.1",
         "--liveness-port", str(liveness), "--metrics-port", str(_free_port()),
         "--sim-image", "kvpin:test"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "KUBECONFIG": str(plane.kubeconfig)},
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not kube.http_ok(f"http://127.0.0.1:{liveness}/healthz"):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            output = (plane.logs / f"operator-{liveness}.log").read_text()[-4000:]
            raise RuntimeError(f"kvpin operator did not start:\n{output}")
        time.sleep(0.2)
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, as Kubernetes does, then wait for kopf's graceful exit."""
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
