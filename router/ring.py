"""One endpoint's ring: consistent hashing with bounded loads over uhashring.

Pure: the ring is built from a membership snapshot, and `pick` is a function of the ring, the
key and the in-flight loads it is handed.

Members are keyed by their stable name (the pod name), so a pod restarted with a new address
keeps its place and its keys; the address is only where to send. Each member has
`virtual_nodes` points on the ring (ketama-compatible md5 placement, as uhashring does).

`pick` walks the ring clockwise from the key's position (uhashring's `range`) and takes the
first member whose in-flight load is within the bound of "Consistent Hashing with Bounded
Loads" (Mirrokni, Thorup, Zadimoghaddam): load + 1 <= ceil(load_factor * (total + 1) / n).
Without load pressure the first member is always taken, so the choice is a pure function of the
membership and the key, and two routers with the same membership agree. A member that joins or
leaves moves only the keys between it and its ring neighbours: about 1/n of them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Iterator, Mapping, Sequence

from uhashring import HashRing

from kvpin import api


class NoReadyMembersError(Exception):
    """The endpoint has no member to send to."""


@dataclasses.dataclass(frozen=True)
class Choice:
    """Where a request goes, and the members to fail over to, in ring order."""

    member: api.RingMember
    primary: api.RingMember  # the first member of the walk: equal to member unless spilled
    fallbacks: tuple[api.RingMember, ...]

    @property
    def spilled(self) -> bool:
        """The key's first member was over its load bound."""
        return self.member != self.primary


class EndpointRing:
    """The ring of one endpoint's members."""

    def __init__(self, members: Sequence[api.RingMember], *, virtual_nodes: int = 160) -> None:
        self.members: dict[str, api.RingMember] = {m.name: m for m in members}
        self.virtual_nodes = virtual_nodes
        self._ring = HashRing(
            nodes={name: {"instance": name, "vnodes": virtual_nodes} for name in self.members},
            hash_fn="ketama",
        )

    def __len__(self) -> int:
        return len(self.members)

    def walk(self, key: str) -> Iterator[api.RingMember]:
        """Every member once, clockwise from the key's position."""
        if not self.members:
            return
        for node in self._ring.range(key):
            yield self.members[node["nodename"]]

    def pick(
        self,
        key: str,
        loads: Mapping[str, int],
        *,
        load_factor: float,
        exclude: Collection[str] = (),
        prefer: str | None = None,
        choices: int = 1,
    ) -> Choice:
        """The first member of the walk within the load bound, skipping `exclude`d ones.

        `prefer` names a member to try first (a conversation that already moved there), still
        subject to the bound. With `choices` > 1 the least loaded of the first `choices` members
        within the bound is taken (the power of two choices, along the ring), which the proxy
        uses for a conversation's first turn. Raises NoReadyMembersError when every member is
        excluded.
        """
        order = [m for m in self.walk(key) if m.name not in exclude]
        if not order:
            raise NoReadyMembersError
        total = sum(loads.get(m, 0) for m in self.members)
        bound = math.ceil(load_factor * (total + 1) / len(self.members))
        candidates = order
        if prefer is not None and prefer in self.members and prefer not in exclude:
            candidates = [self.members[prefer], *(m for m in order if m.name != prefer)]
        eligible = [m for m in candidates if loads.get(m.name, 0) + 1 <= bound][:choices]
        chosen = min(eligible, key=lambda m: loads.get(m.name, 0)) if eligible else None
        if chosen is None:  # only when excluded members hold the load: take the least loaded
            chosen = min(order, key=lambda m: loads.get(m.name, 0))
        return Choice(
            member=chosen,
            primary=order[0],
            fallbacks=tuple(m for m in order if m != chosen),
        )
