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

import bisect
import dataclasses
import math
from collections.abc import Collection, Iterator, Mapping, Sequence

from uhashring import HashRing

from kvpin import api


class NoReadyMembersError(Exception):
    """The endpoint has no member to send to."""


@dataclasses.dataclass(frozen=True)
class Choice:
    """Where a request goes."""

    member: api.RingMember
    primary: api.RingMember  # the first member of the walk: equal to member unless spilled

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
        total = sum(loads.get(m, 0) for m in self.members)
        bound = math.ceil(load_factor * (total + 1) / max(len(self.members), 1))
        primary: api.RingMember | None = None
        eligible: list[api.RingMember] = []
        if (
            prefer is not None and prefer in self.members and prefer not in exclude
            and loads.get(prefer, 0) + 1 <= bound
        ):  # fmt: skip
            eligible.append(self.members[prefer])
        for m in self.walk(key):
            if m.name in exclude:
                continue
            primary = primary or m
            if len(eligible) >= choices:
                break
            if m.name != prefer and loads.get(m.name, 0) + 1 <= bound:
                eligible.append(m)
        if primary is None:
            raise NoReadyMembersError
        if eligible:
            chosen = min(eligible, key=lambda m: loads.get(m.name, 0))
        else:  # only when excluded members hold the load: take the least loaded
            order = [m for m in self.walk(key) if m.name not in exclude]
            chosen = min(order, key=lambda m: loads.get(m.name, 0))
        return Choice(member=chosen, primary=primary)
