"""Prefix breaks: a turn that is not an append-only extension of the turn before it.

Pure (a bounded in-memory table, no I/O). For each conversation the detector keeps a fixed-size
fingerprint of the previous turn: the hash of its system zone, of its tools zone, the number of
history messages and the rolling hash over all of them, and the number and the last name of its
prompt's whole chunks (router.holdings). A turn's own fingerprint (`Turn`) holds the rolling
hash after every message, so the next turn of the same conversation can be checked: same system,
same tools, and its rolling hash at the previous turn's message count equal to the previous
turn's last one, or else, with as many messages, the previous prompt's whole chunks where they
were: its last message grew (a completion prompt, a conversation sent as one growing message),
which keeps the cache. If not, the zone that changed is reported: `system` (a prompt edited,
say a timestamp in it), `tools` (schemas edited or reordered), `history` (earlier messages
rewritten or dropped, as summarizing clients do). Each of these costs the cache everything
after the change. (An edit within the last, partial chunk of a grown message goes unreported:
it costs the cache less than a chunk.)

The detector also keeps the member this replica sent the conversation's latest turn to: the
placement index (router.holdings) names whole chunks only, so where a turn's tail of less than
a chunk went is known only here (router.placement.holders). It is kept with its address, so
that a member that left or restarted since is known for one whose cache is gone, and with the
turn's size and its count of answers (assistant messages): a turn with at most one answer more
is the next one (an answer and a user's message, or a tool call and its results), so that turn
was sent by this replica; with more, another replica sent the turns between.

Memory is bounded in bytes: `capacity` conversations at most, least recently seen dropped first,
each one key, one 48-byte record however long its history, and a reference to a ring member
(`kvpin bench router` measures it with Python's overhead).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import struct
from typing import NamedTuple

from kvpin import api
from kvpin.router.holdings import HASH_BYTES as _CHUNK
from kvpin.router.keys import Zones

ZONES = ("system", "tools", "history")
HEAD_ZONES = ZONES[:2]  # a change there changes the head, and so the routing key
_HASH = 8
_RECORD = struct.Struct(f"<{_HASH}s{_HASH}s{_HASH}sI{_CHUNK}sIII")


class Record(NamedTuple):
    """A turn's fingerprint as the detector keeps it (packed in _RECORD)."""

    system: bytes
    tools: bytes
    last: bytes  # the rolling hash after its last history message
    count: int  # history messages
    chunk: bytes  # the name of its last whole chunk
    chunks: int  # whole chunks
    chars: int  # its prompt's size
    answers: int  # assistant messages


def _hash(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=_HASH).digest()


@dataclasses.dataclass(frozen=True)
class Turn:
    """The fingerprints of one turn: zone hashes and the rolling history hash per message."""

    system: bytes
    tools: bytes
    rolling: bytes  # _HASH bytes after each history message, concatenated
    chunks: bytes = b""  # the names of the prompt's whole chunks (router.holdings.chunk_names)
    chars: int = 0  # of system, tools and history: the prompt's size
    answers: int = 0  # assistant messages in its history

    @property
    def count(self) -> int:
        return len(self.rolling) // _HASH

    def rolling_at(self, count: int) -> bytes:
        """The rolling hash after the first `count` messages (empty for none)."""
        return self.rolling[(count - 1) * _HASH : count * _HASH] if count else b""

    def record(self) -> bytes:
        """The fixed-size fingerprint the detector keeps."""
        n = len(self.chunks) // _CHUNK
        return _RECORD.pack(self.system, self.tools, self.rolling_at(self.count), self.count,
                            self.chunk_at(n), n, self.chars, self.answers)  # fmt: skip

    def chunk_at(self, n: int) -> bytes:
        """The name of the `n`th whole chunk (empty for none)."""
        return self.chunks[(n - 1) * _CHUNK : n * _CHUNK] if n else b""


def fingerprint(zones: Zones, chunks: bytes = b"") -> Turn:
    """The fingerprints of one turn; `chunks` are its prompt's (holdings.chunk_names)."""
    rolling = bytearray()
    h = b""
    chars = len(zones.system) + len(zones.tools) + sum(len(t) for _, t in zones.history)
    answers = sum(role == "assistant" for role, _ in zones.history)
    for role, text in zones.history:
        h = hashlib.blake2b(
            h + role.encode("utf-8", "surrogatepass") + b"\0" + _hash(text), digest_size=_HASH
        ).digest()
        rolling += h
    return Turn(_hash(zones.system), _hash(zones.tools), bytes(rolling), chunks, chars, answers)


def compare(before: Record, now: Turn) -> str | None:
    """The first zone in which `now` does not extend the turn recorded as `before`, or None."""
    if before.system != now.system:
        return "system"
    if before.tools != now.tools:
        return "tools"
    count = before.count
    extended = now.count >= count and now.rolling_at(count) == before.last
    grew = now.count == count and before.chunks and now.chunk_at(before.chunks) == before.chunk
    if count and not extended and not grew:
        return "history"
    return None


@dataclasses.dataclass(frozen=True)
class Seen:
    """What is remembered of a conversation's previous turn, as its next one arrives."""

    broken: str | None = None  # the zone that broke the prefix since then, if any
    member: api.RingMember | None = None  # where this replica sent it (name and address)
    sent_chars: int = 0  # its size, when this replica sent it and it is the turn right before


class BreakDetector:
    """Remembers the last turn of recent conversations, and where it was sent."""

    def __init__(self, capacity: int = 100_000) -> None:
        self.capacity = capacity
        self._turns: collections.OrderedDict[str, tuple[bytes, api.RingMember | None]] = (
            collections.OrderedDict()
        )

    def observe(self, conversation: str, now: Turn) -> Seen:
        """Record this turn; what is known of the turn before it."""
        before, member = self._turns.pop(conversation, (None, None))
        self._turns[conversation] = (now.record(), None)
        if len(self._turns) > self.capacity:
            self._turns.popitem(last=False)
        if before is None:
            return Seen()
        record = Record._make(_RECORD.unpack(before))
        broken = compare(record, now)
        if broken or member is None:
            return Seen(broken)
        return Seen(None, member, record.chars if now.answers <= record.answers + 1 else 0)

    def sent(self, conversation: str, member: api.RingMember) -> None:
        """This conversation's latest turn went to `member`."""
        if conversation in self._turns:
            self._turns[conversation] = (self._turns[conversation][0], member)

    def __len__(self) -> int:
        return len(self._turns)
