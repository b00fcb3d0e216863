"""Every Prometheus metric of the operator, defined once."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

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
CONDITION = Gauge(
    "kvpin_operator_endpoint_condition",
    "Each CachedEndpoint's status conditions: 1 for the status a condition is in, else 0.",
    ["namespace", "endpoint", "type", "status"],
)
_STATUSES = ("True", "False", "Unknown")
_TYPES: dict[tuple[str, str], set[str]] = {}  # the condition types exported per endpoint


def set_conditions(namespace: str, name: str, conditions: Iterable[Mapping[str, Any]]) -> None:
    """Export the conditions just written to an endpoint's status."""
    types = _TYPES.setdefault((namespace, name), set())
    for condition in conditions:
        types.add(kind := str(condition.get("type")))
        for value in _STATUSES:
            CONDITION.labels(namespace, name, kind, value).set(
                1 if condition.get("status") == value else 0
            )


def forget_endpoint(namespace: str, name: str) -> None:
    """An endpoint is gone: drop its series."""
    for kind in _TYPES.pop((namespace, name), ()):
        for value in _STATUSES:
            CONDITION.remove(namespace, name, kind, value)
    with contextlib.suppress(KeyError):  # never changed its ring
        RING_CHANGES.remove(namespace, name)
