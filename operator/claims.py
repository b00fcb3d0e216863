"""Which CachedEndpoint of a namespace owns an endpoint id.

Pure. Two objects may not claim one endpoint id in a namespace (the router could not tell
their pools apart). The oldest claim wins, ties broken by name, so every operator replica and
every resync agrees on the winner without any state of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def endpoint_id_of(body: Mapping[str, Any]) -> str:
    """The id clients send as `model`: spec.endpointId, defaulting to the object's name."""
    spec = body.get("spec") or {}
    return str(spec.get("endpointId") or body["metadata"]["name"])


def find_rival(body: Mapping[str, Any], others: Iterable[Mapping[str, Any]]) -> str | None:
    """The name of an older CachedEndpoint claiming the same id, or None if `body` wins."""
    mine = endpoint_id_of(body)
    me = _rank(body)
    rivals = sorted(
        _rank(o)
        for o in others
        if o["metadata"]["name"] != body["metadata"]["name"]
        and not o["metadata"].get("deletionTimestamp")
        and endpoint_id_of(o) == mine
    )
    if rivals and rivals[0] < me:
        return rivals[0][1]
    return None


def _rank(body: Mapping[str, Any]) -> tuple[str, str]:
    meta = body["metadata"]
    return (str(meta.get("creationTimestamp") or ""), str(meta["name"]))
