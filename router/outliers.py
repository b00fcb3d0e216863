"""Outlier detection: which members to pass over for a while, and why.

Pure (the clock is an argument). Modelled on Envoy's outlier detection: a member is ejected
when it cannot be reached at all (connection refused or reset before a byte: that is never the
request's fault), or after `consecutive` failures (5xx answers or timeouts before the first
byte) on distinct requests with no success in between. A failure counts against a member only
when the request was then served by another member: a request that every member fails on is
evidently the request's own fault (a shape the engines crash on), and must not let one client
eject a healthy pool. A 4xx is the request's fault by definition and counts as a success.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class OutlierSettings:
    consecutive: int = 3
    """Failures on distinct requests, without a success between, that eject a member."""
    eject_seconds: float = 10.0
    """How long an ejected member is passed over."""


class Outliers:
    """Failure counts and ejections, per (endpoint, member)."""

    def __init__(self, settings: OutlierSettings) -> None:
        self.settings = settings
        self._failures: dict[tuple[str, str], int] = {}
        self._until: dict[tuple[str, str], float] = {}

    def ejected(self, endpoint: str, now: float) -> set[str]:
        """Members of `endpoint` passed over at `now`."""
        return {m for (e, m), until in self._until.items() if e == endpoint and until > now}

    def unreachable(self, endpoint: str, member: str, now: float) -> None:
        """A connection error: eject at once."""
        self._eject(endpoint, member, now)

    def failed(self, endpoint: str, member: str, now: float) -> bool:
        """A failure of `member` that another member did not share; True if that ejects it."""
        key = (endpoint, member)
        self._failures[key] = self._failures.get(key, 0) + 1
        if self._failures[key] < self.settings.consecutive:
            return False
        self._eject(endpoint, member, now)
        return True

    def succeeded(self, endpoint: str, member: str) -> None:
        """An answer that was not a server error: the count starts again."""
        self._failures.pop((endpoint, member), None)

    def forget(self, endpoint: str, members: set[str] | None = None) -> None:
        """Drop the state of members that left (all of the endpoint's when None)."""
        for table in (self._failures, self._until):
            gone = [k for k in table if k[0] == endpoint and (members is None or k[1] in members)]
            for key in gone:
                del table[key]

    def _eject(self, endpoint: str, member: str, now: float) -> None:
        self._failures.pop((endpoint, member), None)
        self._until[endpoint, member] = now + self.settings.eject_seconds
