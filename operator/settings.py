"""OperatorConfig: what `kvpin operator` was asked to do, and how kopf is tuned for it.

Built once by the CLI and handed to the handlers through kopf's memo; nothing below reads
flags, files or the environment.
"""

from __future__ import annotations

import dataclasses

import kopf

from kvpin import __version__, api

DEFAULT_SIM_IMAGE = f"ghcr.io/kvpin/kvpin:{__version__}"
# Watched besides CachedEndpoints: the children the operator makes, and their pods.
POD_RESOURCE = ("", "v1", "pods")
CHILD_RESOURCES = (
    ("apps", "v1", "statefulsets"),
    ("", "v1", "services"),
    ("policy", "v1", "poddisruptionbudgets"),
)
# Every child and pod carries these labels (desired.build_labels).
CHILD_LABELS = {api.LABEL_ENDPOINT: kopf.PRESENT, api.LABEL_MANAGED_BY: api.MANAGED_BY}
# The same labels as the API server's label selector (kopf.PRESENT: the key alone).
CHILD_SELECTOR = ",".join(k if v is kopf.PRESENT else f"{k}={v}" for k, v in CHILD_LABELS.items())


@dataclasses.dataclass(frozen=True)
class OperatorConfig:
    """Settings of one operator process."""

    namespaces: tuple[str, ...] = ()
    """Namespaces to watch (glob patterns allowed); empty means the whole cluster."""
    resync_seconds: float = 60.0
    """How often every CachedEndpoint is reconciled again, to repair anything missed."""
    sim_image: str = DEFAULT_SIM_IMAGE
    """Image of the `sim` engine preset: kvpin's own image, which has `kvpin sim`."""
    liveness_host: str = "0.0.0.0"
    liveness_port: int = 8080
    """Liveness endpoint, served by kopf at /healthz; 0 turns it off."""
    metrics_port: int = 9090
    """Prometheus metrics on /metrics; 0 turns it off."""


def apply_kopf_settings(settings: kopf.OperatorSettings, config: OperatorConfig) -> None:
    """Tune kopf for kvpin: where it keeps its bookkeeping, how it watches, what it posts."""
    # Progress and the last-handled spec go into annotations under kvpin's own prefix, never
    # into `status`, which the CRD's structural schema would prune and which the router reads.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=api.KOPF_ANNOTATION_PREFIX
    )
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=api.KOPF_ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{api.KOPF_ANNOTATION_PREFIX}/finalizer"
    # Reconnect watches well before idle load balancers cut them, so events keep flowing.
    settings.watching.server_timeout = 270
    settings.watching.client_timeout = 300
    settings.watching.connect_timeout = 10
    # Children and pods are watched through a label selector the API server applies, so the
    # operator never receives the cluster's other pods (kopf's `labels=` filters client-side).
    for resource in (POD_RESOURCE, *CHILD_RESOURCES):
        settings.watching.label_selectors[resource] = CHILD_SELECTOR
    settings.posting.level = 30  # WARNING and above from handler loggers become Events
    # One replica, no kopf peering: the reconcile is level-triggered and idempotent, so a
    # restarted operator (seconds, with the chart's Recreate strategy) loses nothing, and
    # peering would need kopf's own CRDs and RBAC for no gain in availability.
    settings.peering.standalone = True
