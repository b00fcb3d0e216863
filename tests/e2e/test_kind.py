"""The whole product on a kind cluster: image, chart, a GPU-pinned sim CachedEndpoint, traffic.

Opt-in (`pytest -m e2e`) and only where Docker and kind exist; it creates and deletes its own
cluster from kind-config.yaml. Run: `.venv/bin/pytest -m e2e tests/e2e`. Where the tier must
run (the GitHub e2e job), KVPIN_REQUIRE_E2E=1 turns a missing tool into a failure.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import openai
import pytest
import yaml

from kvpin.sim.cache import cacheable_blocks
from kvpin.sim.config import SimConfig
from tests.e2e import kind
from tests.e2e.kind import NS, ROOT, run

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(kind.TIMEOUT)]
IMAGE = "kvpin:e2e"
NAME = "ep-gpu"
PORT = 18080


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    reason = kind.missing()
    if reason:
        kind.unavailable(reason)
    name = f"kvpin-{uuid.uuid4().hex[:6]}"
    run("kind", "create", "cluster", "--name", name, "--config", str(kind.KIND_CONFIG),
        "--wait", "120s", step="create cluster")  # fmt: skip
    try:
        run("docker", "build", "-t", IMAGE, str(ROOT), step="build image")
        run("kind", "load", "docker-image", IMAGE, "--name", name, step="load image")
        # kind has no GPUs: advertise the extended resource on the GPU-labelled workers
        # (the documented way to advertise an extended resource by hand).
        nodes = run("kubectl", "get", "nodes", "-l", "nvidia.com/gpu.present=true", "-o", "name",
                    step="install chart").split()  # fmt: skip
        assert len(nodes) == len(kind.gpu_workers())
        capacity = '[{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": "8"}]'
        for node in nodes:
            run("kubectl", "patch", node, "--subresource=status", "--type=json", "-p", capacity,
                step="install chart")  # fmt: skip
        run("helm", "install", "kvpin", str(ROOT / "helm" / "kvpin"), "--namespace", NS,
            "--create-namespace", "--set", "image.repository=kvpin", "--set", "image.tag=e2e",
            "--set", "image.pullPolicy=Never", "--wait", "--timeout", "5m",
            step="install chart")  # fmt: skip
        yield name
    finally:
        run("kind", "delete", "cluster", "--name", name, step="delete cluster")


def kubectl_json(*args: str, step: str) -> Any:
    return json.loads(run("kubectl", "-n", NS, *args, "-o", "json", step=step))


def ring(name: str) -> list[str]:
    out = kubectl_json("get", "cep", name, step="gpu pool ready")
    return [m["name"] for m in (out.get("status", {}).get("ring") or {}).get("members", [])]


@pytest.fixture
def router_url(endpoint: str) -> Iterator[str]:
    """The router's Service on loopback, once it answers /readyz."""
    forward = subprocess.Popen(
        ["kubectl", "port-forward", "-n", NS, "svc/kvpin-router", f"{PORT}:80"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{PORT}"
        kind.poll("the router through port-forward", lambda: kind.http_ok(url + "/readyz"),
                  timeout=60)  # fmt: skip
        yield url
    finally:
        forward.terminate()
        forward.wait(timeout=10)


@pytest.fixture(scope="module")
def endpoint(cluster: str) -> str:
    """The GPU sim endpoint, applied once and serving with two members."""
    manifest = kind.gpu_endpoint(NAME, image=IMAGE)
    run("kubectl", "apply", "-n", NS, "-f", "-", input=yaml.safe_dump(manifest),
        step="gpu pool ready")  # fmt: skip
    kind.poll("two ring members", lambda: len(ring(NAME)) == 2,
              timeout=kind.BUDGET["gpu pool ready"], interval=2)  # fmt: skip
    return NAME


def test_gpu_pool_is_pinned_to_gpu_workers(endpoint: str) -> None:
    gpu_nodes = {
        n["metadata"]["name"]
        for n in kubectl_json("get", "nodes", "-l", "nvidia.com/gpu.present=true",
                              step="gpu pool ready")["items"]
    }  # fmt: skip
    pods = kubectl_json("get", "pods", "-l", f"kvpin.dev/endpoint={NAME}", step="gpu pool ready")
    assert len(pods["items"]) == 2
    for pod in pods["items"]:
        engine = pod["spec"]["containers"][0]
        assert engine["resources"]["limits"]["nvidia.com/gpu"] in ("1", 1)
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
            "spec"
        ]["tolerations"]
        assert pod["spec"]["nodeName"] in gpu_nodes


def test_turns_of_a_conversation_hit_one_member_and_its_cache(router_url: str) -> None:
    client = openai.OpenAI(base_url=router_url + "/v1", api_key="unused")
    kind.poll("the endpoint listed by the router",
              lambda: any(m.id == NAME for m in client.models.list()), timeout=60)  # fmt: skip
    messages = [{"role": "system", "content": "You are a careful assistant. " * 50},
                {"role": "user", "content": "First question"}]  # fmt: skip
    first = client.chat.completions.with_raw_response.create(
        model=NAME, messages=messages, max_tokens=8
    )
    answer = first.parse()
    messages += [{"role": "assistant", "content": answer.choices[0].message.content},
                 {"role": "user", "content": "Second question"}]  # fmt: skip
    second = client.chat.completions.with_raw_response.create(
        model=NAME, messages=messages, max_tokens=8
    )
    assert second.headers["x-kvpin-member"] == first.headers["x-kvpin-member"]
    # the pod that answered names itself (the operator gives the sim its POD_NAME): the router's
    # member is that pod, not only its word for it
    assert answer.system_fingerprint == first.headers["x-kvpin-member"]
    assert second.parse().system_fingerprint == first.headers["x-kvpin-member"]
    block = SimConfig().block_size
    whole_first = cacheable_blocks(answer.usage.prompt_tokens, block) * block
    assert second.parse().usage.prompt_tokens_details.cached_tokens >= whole_first


def test_scaling_and_deletion_follow_the_resource(endpoint: str) -> None:
    run("kubectl", "scale", f"cep/{NAME}", "-n", NS, "--replicas=3", step="scale")
    kind.poll("three ring members", lambda: len(ring(NAME)) == 3,
              timeout=kind.BUDGET["scale"], interval=2)  # fmt: skip
    run("kubectl", "delete", "cep", NAME, "-n", NS, "--wait=true", step="delete")
    kind.poll("children collected",
              lambda: not run("kubectl", "get", "sts,pods", "-n", NS, "-l",
                              f"kvpin.dev/endpoint={NAME}", "-o", "name", step="delete"),
              timeout=kind.BUDGET["delete"], interval=2)  # fmt: skip
