"""Which CachedEndpoint owns an endpoint id.

Pure. Two objects may not claim one endpoint id, in one namespace or in two that a router
watches (clients name the endpoint by id alone, so the router could not tell their pools
apart). The oldest claim wins (`api.claim_rank`, the router's own rule), so every operator
replica, every resync and every router agrees on the winner without any state of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kvpin import api


def endpoint_id_of(body: Mapping[str, Any]) -> str:
    """The id clients send as `model`: spec.endpointId, defaulting to the object's name."""
    spec = body.get("spec") or {}
    return str(spec.get("endpointId") or body["metadata"]["name"])


def find_rival(body: Mapping[str, Any], others: Iterable[Mapping[str, Any]]) -> str | None:
    """`namespace/name` of an older CachedEndpoint claiming the same id, or None if `body`
    wins."""
    mine, me = endpoint_id_of(body), api.claim_rank(body)
    rivals = sorted(
        api.claim_rank(o)
        for o in others
        if api.claim_rank(o) != me
        and not o["metadata"].get("deletionTimestamp")
        and endpoint_id_of(o) == mine
    )
    if rivals and rivals[0] < me:
        _, namespace, name = rivals[0]
        return f"{namespace}/{name}"
    return None
