"""The CachedEndpoint CRD as the tests see it: loaded once, its schema as a JSON Schema."""

from __future__ import annotations

import functools
import pathlib
from typing import Any

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
CRD_PATH = ROOT / "crds" / "cachedendpoints.kvpin.dev.yaml"
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


@functools.cache
def load() -> dict[str, Any]:
    """The CRD document."""
    return yaml.safe_load(CRD_PATH.read_text())


def spec_schema() -> dict[str, Any]:
    """The schema of a CachedEndpoint's `spec`, as the API server applies it (defaults too)."""
    (version,) = load()["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]["properties"]["spec"]


def json_schema() -> dict[str, Any]:
    """The v1alpha1 openAPIV3Schema without Kubernetes' extensions (CEL runs on a real API
    server, in the control-plane tier)."""
    (version,) = load()["spec"]["versions"]
    return _strip(version["schema"]["openAPIV3Schema"])


def _strip(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node
