"""Every way of installing kvpin gives a working `kvpin`: an editable install in setuptools'
default mode and in strict mode, a regular install, and a built wheel, each into a fresh venv.

Real pip and setuptools (from PyPI, in pip's isolated build environment). The fresh venvs get
kvpin alone (`--no-deps`); its dependencies are borrowed from the test environment through a
.pth line, so nothing but kvpin's own packaging is under test and nothing large is downloaded.
"""

from __future__ import annotations

import pathlib
import shutil
import site
import subprocess
import sys

import pytest

from tests import toolchain

IMPORTS = "import kvpin.router.proxy, kvpin.router.membership.kubernetes, kvpin.sim.server, " \
          "kvpin.operator.spec, kvpin.bench.runner; print('imports ok')"  # fmt: skip


def fresh_venv(where: pathlib.Path) -> pathlib.Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    (packages,) = where.glob("lib/python*/site-packages")
    (packages / "borrowed.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return where / "bin"


def pip(venv: pathlib.Path, *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "python"), "install", "--quiet",
         "--no-deps", *args], check=True, cwd=toolchain.ROOT,
    )  # fmt: skip


def works(venv: pathlib.Path) -> None:
    """Imports every part from outside the checkout, and runs the CLI."""
    out = subprocess.run([str(venv / "python"), "-c", IMPORTS], capture_output=True, text=True,
                         cwd="/", check=False)  # fmt: skip
    assert out.stdout.strip() == "imports ok", out.stderr[-2000:]
    version = subprocess.run([str(venv / "kvpin"), "--version"], capture_output=True, text=True,
                             cwd="/", check=True)  # fmt: skip
    assert version.stdout.startswith("kvpin ")


@pytest.mark.parametrize(
    "how",
    [("-e", "."), ("-e", ".", "--config-settings", "editable_mode=strict"), (".",)],
    ids=["editable", "editable strict", "regular"],
)
def test_an_install_gives_a_working_kvpin(how: tuple[str, ...], tmp_path: pathlib.Path) -> None:
    venv = fresh_venv(tmp_path / "venv")
    pip(venv, *how)
    works(venv)


def test_a_built_wheel_gives_a_working_kvpin(tmp_path: pathlib.Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path),
         str(toolchain.ROOT)], check=True,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("kvpin-*.whl")
    venv = fresh_venv(tmp_path / "venv")
    pip(venv, str(wheel))
    works(venv)
    shutil.rmtree(toolchain.ROOT / "build" / "lib", ignore_errors=True)
