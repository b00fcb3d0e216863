"""Every Prometheus metric of the operator, defined once."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

RECONCILES = Counter(
    "kvpin_operator_reconciles_total",
    "CachedEndpoint reconciliations, by outcome (ok, degraded, error).",
    ["result"],
)
RECONCILE_SECONDS = Histogram(
    "kvpin_operator_reconcile_duration_seconds",
    "Time to reconcile one CachedEndpoint's children and status.",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
STATUS_WRITES = Counter(
    "kvpin_operator_status_writes_total",
    "Status patches written, by trigger (reconcile, pod, statefulset).",
    ["trigger"],
)
RING_CHANGES = Counter(
    "kvpin_operator_ring_changes_total",
    "Times an endpoint's published ring membership changed.",
    ["namespace", "endpoint"],
)
ERRORS = Counter(
    "kvpin_operator_errors_total",
    "API errors met while reconciling, retried later.",
)
