"""The real helm binary (built with the control-plane tools) and a renderer over it."""

from __future__ import annotations

import pathlib
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from tests import toolchain

CHART = toolchain.ROOT / "helm" / "kvpin"
Render = Callable[..., list[dict[str, Any]]]


@pytest.fixture(scope="session")
def helm() -> pathlib.Path:
    return toolchain.bindir() / "helm"


@pytest.fixture(scope="session")
def render(helm: pathlib.Path) -> Render:
    """`helm template` with --set values; the rendered objects."""

    def run(*sets: str) -> list[dict[str, Any]]:
        args = [str(helm), "template", "kvpin", str(CHART), "--namespace", "kvpin-system"]
        for value in sets:
            args += ["--set", value]
        out = subprocess.run(args, capture_output=True, text=True, check=True)
        return [doc for doc in yaml.safe_load_all(out.stdout) if doc]

    return run
