"""Router replicas share the endpoints: each endpoint is decided by one replica.

Every replica of a router can be told the others (`kvpin router --replicas`, or a DNS name that
lists them all, `--replicas-dns`, such as a headless Service). A request for an endpoint another
replica owns is relayed to that replica as it came, and decided there; so every request of an
endpoint, whichever replica the client reached, is placed by the one replica that sees all of
that endpoint's traffic: its requests in flight on each member, what it sent each member's cache,
the turns before of every conversation and the heads its new conversations open with. Three
replicas then decide like one. Sharing the key space instead (each routing key decided by its
own owner) left each owner a third of the picture of the members its keys share: on `long`
three such replicas were 4 to 8 points behind one router, and an index corrected for the
traffic it could not see did not close that (docs/benchmark-history.md, sessions 10 to 28).
The price: an endpoint's traffic passes through its owner, so one endpoint is served at the
rate of one replica (`kvpin bench router` measures it); replicas spread endpoints among them
and stand in for each other.

The owner of an endpoint is chosen by rendezvous hashing (the replica with the highest hash of
endpoint and replica): every replica computes the same owner from the same list, and a replica
that joins or leaves moves only the endpoints it owns. A replica that cannot be reached is
passed over for `cooldown` seconds, its endpoints going to their next owner: relaying costs a
hop, never a request. Pure but for the clock passed in, except follow_dns, which reads DNS.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import socket
import urllib.parse
from collections.abc import Iterable

from kvpin import logs

log = logging.getLogger(logs.PROXY)

FORWARDED_HEADER = "X-Kvpin-Replica"  # set on a relayed request: decide it, relay it no further


def _score(endpoint: str, replica: str) -> bytes:
    return hashlib.blake2b(f"{endpoint}\x1f{replica}".encode(), digest_size=8).digest()


def owner_of(endpoint: str, replicas: Iterable[str]) -> str | None:
    """The replica that decides `endpoint`: the same on every replica with the same list."""
    return max(replicas, key=lambda r: _score(endpoint, r), default=None)


class Replicas:
    """This replica's view of its peers: who they are, and which failed lately."""

    def __init__(self, me: str, replicas: Iterable[str] = (), cooldown: float = 5.0) -> None:
        self.me = me
        self.cooldown = cooldown
        self._all: frozenset[str] = frozenset()
        self._down: dict[str, float] = {}  # replica -> until when it is passed over
        self.update(replicas)

    def update(self, replicas: Iterable[str]) -> None:
        """The replicas now (this one is always among them)."""
        self._all = frozenset(replicas) | {self.me}
        self._down = {r: t for r, t in self._down.items() if r in self._all}

    def owner(self, endpoint: str, now: float) -> str | None:
        """The replica to relay a request for `endpoint` to; None: this one decides it."""
        if len(self._all) < 2:
            return None
        up = [r for r in self._all if self._down.get(r, -math.inf) <= now]
        owner = owner_of(endpoint, up)
        return None if owner in (None, self.me) else owner

    def failed(self, replica: str, now: float) -> None:
        """`replica` could not be reached: pass it over for a while."""
        self._down[replica] = now + self.cooldown

    def __len__(self) -> int:
        return len(self._all)


def urls(addresses: Iterable[str], like: str) -> set[str]:
    """The replicas' URLs from their addresses, with the scheme and port of this one's."""
    parts = urllib.parse.urlsplit(like)
    port = f":{parts.port}" if parts.port else ""
    return {f"{parts.scheme}://{f'[{a}]' if ':' in a else a}{port}" for a in addresses}


async def follow_dns(replicas: Replicas, name: str, interval: float = 5.0) -> None:
    """Keep `replicas` to the addresses `name` resolves to (a headless Service lists every
    ready router pod), every `interval` seconds; a failed lookup keeps the last list."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            found = await loop.getaddrinfo(name, None, type=socket.SOCK_STREAM)
        except OSError as err:
            log.warning("replicas: %s did not resolve (%s); keeping %d", name, err, len(replicas))
        else:
            replicas.update(urls((str(info[4][0]) for info in found), replicas.me))
        await asyncio.sleep(interval)
