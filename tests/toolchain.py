"""The tools the control-plane and chart tiers need, built by hack/controlplane.sh.

Without Go they cannot be built: the tier is skipped, saying why; with
KVPIN_REQUIRE_CONTROLPLANE=1 (as .ci/run sets) that is a failure instead of a skip.
"""

from __future__ import annotations

import functools
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "hack" / "controlplane.sh"


def unavailable(reason: str) -> None:
    """Skip, or fail where the tier is required."""
    if os.environ.get("KVPIN_REQUIRE_CONTROLPLANE") == "1":
        pytest.fail(f"control plane required but unavailable: {reason}")
    pytest.skip(reason)


@functools.cache
def bindir() -> pathlib.Path:
    """The folder of the built binaries, building them on first use."""
    found = subprocess.run([str(SCRIPT), "bindir"], capture_output=True, text=True, check=False)
    if found.returncode == 0:
        return pathlib.Path(found.stdout.strip())
    if shutil.which("go") is None:
        unavailable("no Go toolchain: hack/controlplane.sh builds the control plane with it")
    print("building the control plane (first run only) ...", file=sys.stderr)
    built = subprocess.run([str(SCRIPT), "build"], capture_output=True, text=True, check=False)
    if built.returncode != 0:
        pytest.fail(f"hack/controlplane.sh build failed:\n{built.stderr[-4000:]}")
    return pathlib.Path(built.stdout.strip().splitlines()[-1])
