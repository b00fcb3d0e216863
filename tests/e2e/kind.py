"""Helpers of the kind e2e tier, kept apart so that what needs no Docker is unit-tested
(tests/unit/test_e2e_helpers.py): the tool check and its switch, the time budget, the GPU
endpoint, polling with a deadline.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
KIND_CONFIG = ROOT / "kind-config.yaml"
NS = "kvpin-e2e"
REQUIRE_ENV = "KVPIN_REQUIRE_E2E"
TOOLS = ("docker", "kind", "kubectl", "helm")

# Seconds per step (each is also the step's own subprocess timeout). The test's timeout is
# their sum with a margin: pytest-timeout counts fixture set-up, where most of the time goes.
BUDGET = {
    "create cluster": 300,
    "build image": 900,
    "load image": 300,
    "install chart": 300,
    "gpu pool ready": 300,
    "traffic": 120,
    "scale": 300,
    "delete": 180,
    "delete cluster": 180,
}
TIMEOUT = int(sum(BUDGET.values()) * 1.2)
POD_REQUESTS = {"cpu": "100m", "memory": "256Mi"}

T = TypeVar("T")


def missing(which: Callable[[str], str | None] = shutil.which) -> str | None:
    """Why the tier cannot run here, or None."""
    for tool in TOOLS:
        if which(tool) is None:
            return f"{tool} is not installed"
    if subprocess.run(["docker", "info"], capture_output=True, check=False).returncode:
        return "no Docker engine is running"
    return None


def unavailable(reason: str) -> None:
    """Skip; fail instead where the tier is required (the GitHub e2e job sets REQUIRE_ENV):
    a job that passes by skipping proves nothing."""
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"the kind e2e tier is required ({REQUIRE_ENV}=1) but cannot run: {reason}")
    pytest.skip(f"the kind e2e tier needs Docker, kind, kubectl and helm: {reason}")


def run(*args: str, step: str, input: str | None = None) -> str:
    """Run a command within its step's budget; its stderr in the failure."""
    done = subprocess.run(
        args, input=input, capture_output=True, text=True, check=False, timeout=BUDGET[step]
    )
    if done.returncode:
        raise AssertionError(f"{step}: {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done.stdout


def poll(
    what: str,
    probe: Callable[[], T],
    *,
    timeout: float,
    interval: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """The first truthy value of `probe`, tried until `timeout` seconds have passed. A probe
    that raises OSError (a port not listening yet) counts as not yet."""
    deadline = clock() + timeout
    while True:
        try:
            value = probe()
        except OSError:
            value = None
        if value:
            return value
        if clock() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        sleep(interval)


def http_ok(url: str) -> bool:
    """GET `url` answered 200."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except urllib.error.HTTPError:
        return False


def gpu_workers() -> list[dict[str, Any]]:
    """The kind workers labelled as GPU nodes, with their labels and taints."""
    config = yaml.safe_load(KIND_CONFIG.read_text())
    workers = []
    for node in config["nodes"]:
        labels = node.get("labels") or {}
        if labels.get("nvidia.com/gpu.present") != "true":
            continue
        taints = []
        for patch in node.get("kubeadmConfigPatches") or []:
            registration = yaml.safe_load(patch).get("nodeRegistration") or {}
            taints += registration.get("taints") or []
        workers.append({"labels": labels, "taints": taints})
    return workers


def gpu_endpoint(name: str, *, image: str, replicas: int = 2) -> dict[str, Any]:
    """A sim CachedEndpoint that asks for one GPU per pod on the kind GPU workers' product:
    the GPU limit, toleration and node affinity are exercised end to end (the sim itself
    needs no GPU; the workers advertise capacity by a node-status patch)."""
    product = gpu_workers()[0]["labels"]["nvidia.com/gpu.product"]
    return {
        "apiVersion": "kvpin.dev/v1alpha1",
        "kind": "CachedEndpoint",
        "metadata": {"name": name},
        "spec": {
            "model": "sim-8b",
            "replicas": replicas,
            "vramReservation": "512Mi",
            "engine": {"preset": "sim", "image": image},
            "gpu": {"count": 1, "product": product},
            # A GPU engine's default requests (2 CPUs, 16Gi) would not fit a CI runner.
            "pod": {"resources": {"requests": dict(POD_REQUESTS)}},
        },
    }
