"""kvpin: keep LLM prompt caches hot on Kubernetes.

Layout (each folder is one part; see README.md):
  kvpin/     the contract both halves share (`api`), the CLI, logging set-up
  operator/  -> kvpin.operator: CachedEndpoint -> StatefulSet, Service, PDB, status.ring
  router/    -> kvpin.router: membership -> rings -> pick -> proxy
"""

__version__ = "0.1.0"
