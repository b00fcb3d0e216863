"""kvpin: keep LLM prompt caches hot on Kubernetes.

Layout (each top-level folder is one part; see README.md):
  kvpin/     the contract both halves share (`api`), the CLI, logging set-up
  operator/  -> kvpin.operator: CachedEndpoint -> StatefulSet, Service, PDB, status.ring
  sim/       -> kvpin.sim: a GPU-free engine with a vLLM-like prefix cache
  bench/     -> kvpin.bench: benchmarks that print tables
"""

import pathlib
import pkgutil

# The folders above are mapped into this package by the build. A `python` started in the
# repository root finds ./kvpin first, which holds none of them; extending the path to the
# installed copy of kvpin makes `import kvpin.sim` work from there too.
__path__ = pkgutil.extend_path(__path__, __name__)

# An editable install in setuptools' default mode serves this folder itself, and its finder
# does not serve folders mapped onto subpackages that have no __init__.py (operator/ must not
# have one): in a source checkout, the repository root is where they are.
_root = pathlib.Path(__file__).resolve().parent.parent
if not (pathlib.Path(__file__).parent / "router").is_dir() and (_root / "router").is_dir():
    __path__.append(str(_root))

__version__ = "0.1.0"
