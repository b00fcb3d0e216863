"""The CachedEndpoint contract shared by the operator and the router.

Pure: names, keys and the ring membership record, with its conversion to and from
`status.ring`. Both halves import this module and nothing else of each other, so the shape
of `status.ring` is written down exactly once.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

GROUP = "kvpin.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "CachedEndpoint"
PLURAL = "cachedendpoints"
SHORT_NAME = "cep"

# Labels and annotations on every child and pod.
LABEL_ENDPOINT = f"{GROUP}/endpoint"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_NAME = "app.kubernetes.io/name"
MANAGED_BY = "kvpin-operator"
ANNOTATION_VRAM = f"{GROUP}/vram-reservation"
ANNOTATION_VRAM_BYTES = f"{GROUP}/vram-reservation-bytes"
ANNOTATION_ENDPOINT_ID = f"{GROUP}/endpoint-id"
# On the router's warm-up requests to a joining member (router.warmup), so engines, their
# proxies and `kvpin sim` can tell them from user traffic.
WARMUP_HEADER = "X-Kvpin-Warmup"

# Where kopf keeps its own bookkeeping on the CachedEndpoint.
KOPF_ANNOTATION_PREFIX = f"operator.{GROUP}"

FIELD_MANAGER = "kvpin-operator"


def claim_rank(body: Mapping[str, Any]) -> tuple[str, str, str]:
    """Two CachedEndpoints claiming one endpoint id (in one namespace or several): the lower
    rank, the older object, wins. The operator publishes no ring for the loser and the router
    serves the winner, so both must rank alike, with no state of their own."""
    meta = body["metadata"]
    return (
        str(meta.get("creationTimestamp") or ""),
        str(meta.get("namespace") or ""),
        str(meta["name"]),
    )


@dataclasses.dataclass(frozen=True, order=True)
class RingMember:
    """One Ready pod of an endpoint: its stable pod name and where it serves."""

    name: str
    address: str  # "ip:port"

    @property
    def url(self) -> str:
        """The member's base URL for the router."""
        return f"http://{self.address}"


@dataclasses.dataclass(frozen=True)
class Ring:
    """The members a router must use for one endpoint, sorted by name."""

    members: tuple[RingMember, ...] = ()

    @classmethod
    def of(cls, members: Iterable[RingMember]) -> Ring:
        """Build a ring in canonical order, so equal sets compare and hash equal."""
        return cls(tuple(sorted(set(members))))

    @property
    def version(self) -> str:
        """A digest of the member set: it changes exactly when the set changes.

        A content hash rather than a counter keeps the computation pure: two operator
        replicas, or one before and after a restart, agree on it without reading history.
        """
        digest = hashlib.sha256()
        for member in self.members:
            digest.update(f"{member.name}={member.address}\n".encode())
        return digest.hexdigest()[:12]

    def to_status(self) -> dict[str, Any]:
        """The `status.ring` document."""
        return {
            "version": self.version,
            "size": len(self.members),
            "members": [{"name": m.name, "address": m.address} for m in self.members],
        }

    @classmethod
    def from_status(cls, ring: Mapping[str, Any] | None) -> Ring:
        """Parse `status.ring`; entries without a name or address are skipped."""
        members = (ring or {}).get("members") or []
        return cls.of(
            RingMember(name=str(m["name"]), address=str(m["address"]))
            for m in members
            if isinstance(m, Mapping) and m.get("name") and m.get("address")
        )
