"""The whole product on a kind cluster: image, chart, a sim-engine CachedEndpoint, traffic.

Opt-in (`pytest -m e2e`) and only where Docker and kind exist; it creates and deletes its own
cluster from kind-config.yaml. Run: `.venv/bin/pytest -m e2e tests/e2e`.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator

import openai
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e
NS = "kvpin-e2e"


def _missing() -> str | None:
    for tool in ("docker", "kind", "kubectl", "helm"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if subprocess.run(["docker", "info"], capture_output=True, check=False).returncode:
        return "no Docker engine is running"
    return None


def run(*args: str, input: str | None = None) -> str:
    return subprocess.run(
        args, input=input, capture_output=True, text=True, check=True, timeout=900
    ).stdout


def wait(what: str, probe, timeout: float = 300):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    reason = _missing()
    if reason:
        pytest.skip(f"the kind e2e suite needs Docker and kind: {reason}")
    name = f"kvpin-{uuid.uuid4().hex[:6]}"
    image = "kvpin:e2e"
    run("kind", "create", "cluster", "--name", name, "--config", str(ROOT / "kind-config.yaml"))
    try:
        run("docker", "build", "-t", image, str(ROOT))
        run("kind", "load", "docker-image", image, "--name", name)
        # kind has no GPUs: advertise the extended resource on the GPU-labelled workers.
        nodes = run("kubectl", "get", "nodes", "-l", "nvidia.com/gpu.present=true", "-o", "name")
        capacity = '[{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": "8"}]'
        for node in nodes.split():
            run("kubectl", "patch", node, "--subresource=status", "--type=json", "-p", capacity)
        run("helm", "install", "kvpin", str(ROOT / "helm" / "kvpin"), "--namespace", NS,
            "--create-namespace", "--set", "image.repository=kvpin", "--set", "image.tag=e2e",
            "--set", "image.pullPolicy=Never", "--wait", "--timeout", "5m")  # fmt: skip
        yield name
    finally:
        run("kind", "delete", "cluster", "--name", name)


def ring(name: str) -> list[str]:
    out = json.loads(run("kubectl", "get", "cep", name, "-n", NS, "-o", "json"))
    return [m["name"] for m in (out.get("status", {}).get("ring") or {}).get("members", [])]


def test_sim_endpoint_serves_cached_turns_and_follows_scaling(cluster: str) -> None:
    manifest = (ROOT / "examples" / "sim.yaml").read_text().replace("replicas: 3", "replicas: 2")
    run("kubectl", "apply", "-n", NS, "-f", "-", input=manifest)
    run("kubectl", "patch", "cep", "ep-sim", "-n", NS, "--type=merge", "-p",
        '{"spec": {"engine": {"image": "kvpin:e2e"}}}')  # fmt: skip
    wait("two ring members", lambda: len(ring("ep-sim")) == 2)
    proxy = subprocess.Popen(
        ["kubectl", "port-forward", "-n", NS, "svc/kvpin-router", "18080:80"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        time.sleep(3)
        client = openai.OpenAI(base_url="http://127.0.0.1:18080/v1", api_key="unused")
        messages = [{"role": "system", "content": "You are a careful assistant. " * 50},
                    {"role": "user", "content": "First question"}]  # fmt: skip
        first = client.chat.completions.create(model="ep-sim", messages=messages, max_tokens=8)
        messages += [{"role": "assistant", "content": first.choices[0].message.content},
                     {"role": "user", "content": "Second question"}]  # fmt: skip
        second = client.chat.completions.create(model="ep-sim", messages=messages, max_tokens=8)
        assert second.usage.prompt_tokens_details.cached_tokens > 0
    finally:
        proxy.terminate()
    run("kubectl", "scale", "cep/ep-sim", "-n", NS, "--replicas=3")
    wait("three ring members", lambda: len(ring("ep-sim")) == 3)
    run("kubectl", "delete", "cep", "ep-sim", "-n", NS)
    wait("children collected", lambda: not run("kubectl", "get", "sts", "-n", NS, "-o", "name"))
