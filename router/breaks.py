"""Prefix breaks: a turn that is not an append-only extension of the turn before it.

Pure (a bounded in-memory table, no I/O). For each conversation the detector keeps fingerprints
of the previous turn: the hash of its system zone, of its tools zone, and a rolling hash of its
history with the message count. The next turn of the same conversation must have the same system
and tools and start with the same messages; if not, the zone that changed is reported: `system`
(a prompt edited, say a timestamp in it), `tools` (schemas edited or reordered), `history`
(earlier messages rewritten or dropped, as summarizing clients do). Each of these costs the
cache everything after the change.

Memory is bounded: at most `capacity` conversations, least recently seen dropped first, about
100 bytes each.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib

from kvpin.router.keys import Zones

ZONES = ("system", "tools", "history")


@dataclasses.dataclass(frozen=True)
class _Turn:
    system: bytes
    tools: bytes
    history: tuple[bytes, ...]  # rolling hash after each message (8 bytes each)


def _hash(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()


def fingerprint(zones: Zones) -> _Turn:
    """The fingerprints of one turn."""
    rolling = []
    h = b""
    for role, text in zones.history:
        h = hashlib.blake2b(h + role.encode() + b"\0" + _hash(text), digest_size=8).digest()
        rolling.append(h)
    return _Turn(_hash(zones.system), _hash(zones.tools), tuple(rolling))


def compare(before: _Turn, now: _Turn) -> str | None:
    """The first zone in which `now` does not extend `before`, or None."""
    if before.system != now.system:
        return "system"
    if before.tools != now.tools:
        return "tools"
    n = len(before.history)
    if n and (len(now.history) < n or now.history[n - 1] != before.history[n - 1]):
        return "history"
    return None


class BreakDetector:
    """Remembers the last turn of recent conversations."""

    def __init__(self, capacity: int = 100_000) -> None:
        self.capacity = capacity
        self._turns: collections.OrderedDict[str, _Turn] = collections.OrderedDict()

    def observe(self, conversation: str, zones: Zones) -> str | None:
        """Record this turn; the zone that broke the prefix since the last turn, or None."""
        now = fingerprint(zones)
        before = self._turns.pop(conversation, None)
        self._turns[conversation] = now
        if len(self._turns) > self.capacity:
            self._turns.popitem(last=False)
        return compare(before, now) if before is not None else None

    def __len__(self) -> int:
        return len(self._turns)
