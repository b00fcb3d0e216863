"""One endpoint's ring: consistent hashing with bounded loads over uhashring.

Pure: the ring is built from a membership snapshot; `walk` is a function of the ring and the
key, `within_bound` of a walk and the in-flight loads it is handed.

Members are keyed by their stable name (the pod name), so a pod restarted with a new address
keeps its place and its keys; the address is only where to send. Each member has
`virtual_nodes` virtual nodes, 4 points on the ring each (ketama's md5 placement, as uhashring
does).

`walk` goes clockwise from the key's position (uhashring's `range`): the key's ring owner first,
then the members that take over its keys if it leaves. `within_bound` keeps the members of a
walk whose in-flight load is within the bound of "Consistent Hashing with Bounded Loads"
(Mirrokni, Thorup, Zadimoghaddam): load + 1 <= ceil(load_factor * (total + 1) / n), the hard cap
under placement by cost (router.placement). A member that joins or leaves moves only the keys
between it and its ring neighbours: about 1/n of them.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Mapping, Sequence

from uhashring import HashRing

from kvpin import api


class NoReadyMembersError(Exception):
    """The endpoint has no member to send to."""


class EndpointRing:
    """The ring of one endpoint's members."""

    def __init__(self, members: Sequence[api.RingMember], *, virtual_nodes: int = 160) -> None:
        self.members: dict[str, api.RingMember] = {m.name: m for m in members}
        self.virtual_nodes = virtual_nodes
        self._ring = HashRing(
            nodes={name: {"instance": name, "vnodes": virtual_nodes} for name in self.members},
            hash_fn="ketama",
        )
        points = self._ring.get_points() if self.members else []
        self._positions = [position for position, _ in points]
        self._owners = [self.members[name] for _, name in points]

    def __len__(self) -> int:
        return len(self.members)

    def walk(self, key: str) -> Iterator[api.RingMember]:
        """Every member once, clockwise from the key's position.

        The order of uhashring's `range(key)`, walked over the ring's points without copying
        them (uhashring slices its key list on every call): lazily, since a pick usually needs
        only the first member.
        """
        owners, n = self._owners, len(self._owners)
        if not n:
            return
        start = bisect.bisect(self._positions, self._ring.get_key(key)) % n
        seen: set[str] = set()
        for i in range(start, start + n):
            member = owners[i % n]
            if member.name not in seen:
                seen.add(member.name)
                yield member
                if len(seen) == len(self.members):
                    return


MIN_BOUND = 4  # requests in flight on one member that are never skew


def within_bound(
    walk: Sequence[api.RingMember], loads: Mapping[str, int], *, load_factor: float, size: int
) -> list[api.RingMember]:
    """The members of `walk` whose in-flight load is within the bound, in walk order; the least
    loaded alone if none is (when excluded members hold the load, say).

    The bound is never below MIN_BOUND: a few requests in flight on one member are no skew (an
    engine batches dozens, and the cost rule, router.placement, weighs the prefill they queue),
    and a tighter bound at low load sends a conversation's turns away from the member holding
    its prefix whenever a burst lands a few requests on it. At 2, a member with three of the
    pool's five requests in flight passed a fourth over: on the bursty trace that cost 1.5
    points of hit rate and a higher TTFT, and on `long` hit rate
    (docs/benchmark-history.md, session 12). Router replicas need no other floor: the one
    replica that decides an endpoint counts all of its requests (router.replicas).
    """
    bound = max(MIN_BOUND, math.ceil(load_factor * (sum(loads.values()) + 1) / max(size, 1)))
    kept = [m for m in walk if loads.get(m.name, 0) + 1 <= bound]
    return kept or [min(walk, key=lambda m: loads.get(m.name, 0))]
