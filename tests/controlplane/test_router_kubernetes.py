"""`kvpin router --kubernetes` against the real control plane: it follows status.ring as the
operator publishes it, and requests sent through it reach real `kvpin sim` processes listening
on the pods' (loopback) addresses."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import random
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from kvpin import api
from tests import figures
from tests.controlplane import cluster
from tests.controlplane.kube import Kube, http_ok, wait_for

pytestmark = [pytest.mark.controlplane, pytest.mark.usefixtures("operator_process")]
KVPIN = pathlib.Path(sys.executable).parent / "kvpin"


@contextlib.contextmanager
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for proc in started:
            proc.terminate()
        for proc in started:
            proc.wait(10)


def kubernetes_router(
    control_plane: cluster.ControlPlane, namespace: str
) -> tuple[str, subprocess.Popen[bytes]]:
    """`kvpin router --kubernetes` for one namespace, ready; its URL and process."""
    port = cluster.free_port()
    proc = subprocess.Popen(
        [str(KVPIN), "router", "--kubernetes", "-n", namespace,
         "--kubeconfig", str(control_plane.kubeconfig), "--host", "127.0.0.1",
         "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    router = f"http://127.0.0.1:{port}"
    wait_for("router ready", lambda: http_ok(f"{router}/readyz"))
    return router, proc


def members_of(router: str) -> dict[str, int]:
    with urllib.request.urlopen(f"{router}/v1/models", timeout=2) as r:
        return {m["id"]: m["members"] for m in json.loads(r.read())["data"]}


def ready_pods(client: Kube, namespace: str, name: str) -> dict[str, str]:
    out = {}
    for pod in client.pods(namespace, name):
        conditions = pod["status"].get("conditions", [])
        if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
            out[pod["metadata"]["name"]] = pod["status"]["podIP"]
    return out


def test_router_follows_the_ring_and_reaches_the_pods(
    control_plane: cluster.ControlPlane, client: Kube, namespace: str
) -> None:
    port = random.randint(20_000, 30_000)
    body: dict[str, Any] = {
        "apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": "ep-sim"},
        "spec": {"model": "sim-8b", "replicas": 2, "vramReservation": "1Gi",
                 "engine": {"preset": "sim", "port": port}, "gpu": {"count": 0}},
    }  # fmt: skip
    client.create_endpoint(namespace, body)
    with processes() as started:
        router, proc = kubernetes_router(control_plane, namespace)
        started.append(proc)
        pods = wait_for(
            "two Ready pods", lambda: len(p := ready_pods(client, namespace, "ep-sim")) == 2 and p
        )

        def start_sim(ip: str) -> None:
            started.append(subprocess.Popen(
                [str(KVPIN), "sim", "--host", ip, "--port", str(port), "--served-model-name",
                 "ep-sim", "--time-scale", "0", "--log-level", "WARNING"],
                env=os.environ.copy(),
            ))  # fmt: skip
            wait_for(f"sim on {ip}", lambda: http_ok(f"http://{ip}:{port}/health"))

        for ip in pods.values():
            start_sim(ip)
        wait_for("router sees 2 members", lambda: members_of(router).get("ep-sim") == 2)

        sdk = openai.OpenAI(base_url=f"{router}/v1", api_key="x", max_retries=0)
        served = set()
        for i in range(12):
            raw = sdk.chat.completions.with_raw_response.create(
                model="ep-sim", max_tokens=2, messages=[{"role": "user", "content": f"hello {i}"}]
            )
            served.add(raw.headers["x-kvpin-member"])
        assert served <= set(pods)
        assert len(served) == 2

        # Scale up: measure from the pod turning Ready to the router using it.
        control_plane.kubectl("scale", "-n", namespace, "cep/ep-sim", "--replicas=3")
        new = wait_for(
            "a third Ready pod",
            lambda: (p := ready_pods(client, namespace, "ep-sim")).get("ep-sim-2") and p,
        )
        ready_seen = time.monotonic()
        wait_for("router sees 3 members", lambda: members_of(router).get("ep-sim") == 3)
        router_in = time.monotonic() - ready_seen
        start_sim(new["ep-sim-2"])
        figures.record("pod Ready (as observed) -> router ring", f"{router_in:.2f}s")

        # Scale down: the departed member gets no more traffic.
        control_plane.kubectl("scale", "-n", namespace, "cep/ep-sim", "--replicas=1")
        wait_for("router sees 1 member", lambda: members_of(router).get("ep-sim") == 1)
        for i in range(6):
            raw = sdk.chat.completions.with_raw_response.create(
                model="ep-sim", max_tokens=2, messages=[{"role": "user", "content": f"bye {i}"}]
            )
            assert raw.headers["x-kvpin-member"] == "ep-sim-0"

        client.delete_endpoint(namespace, "ep-sim")
        wait_for("the endpoint gone from the router", lambda: "ep-sim" not in members_of(router))
