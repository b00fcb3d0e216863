"""The folder `operator/` must never shadow the standard library's `operator` module."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent


def test_operator_folder_has_no_init() -> None:
    # A regular package in the working directory would win over the standard module.
    assert not (ROOT / "operator" / "__init__.py").exists()


def test_python_started_in_the_repository_root_imports_the_standard_operator() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import json, operator; print(operator.__file__)"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert not out.stdout.strip().startswith(str(ROOT / "operator"))


def test_python_started_in_the_repository_root_finds_the_mapped_packages() -> None:
    code = "import kvpin.operator.handlers, kvpin.sim.server; print('ok')"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert out.stdout.strip() == "ok", out.stderr


def test_the_build_maps_operator_onto_kvpin_operator() -> None:
    import kvpin.operator.handlers

    assert pathlib.Path(kvpin.operator.handlers.__file__).name == "handlers.py"
    assert kvpin.operator.__name__ == "kvpin.operator"
