"""What each member probably holds in its KV cache, from what the router sent it.

Pure (bounded tables, no I/O, no clock). A prompt is read as a stream of characters (system,
tools, then each message with its role) cut into chunks of CHUNK_CHARS; chunk i is named by a
hash of everything up to its end, so two prompts share the names of exactly the chunks of the
prefix they share (router.bodies computes them with the rest of the summary). For each member
the index keeps the names of the chunks it was sent, least recently sent first, the way the
engine keeps its blocks: when a member's cache size is known (`resize`, in chunks, from its
metrics or configured), the least recently sent chunks beyond it are dropped as the engine's
LRU evicts them (within a prompt the tail first, as vLLM frees a request's blocks tail first).
Prompts sent to a member and not yet prefilled (`admitting`) count as room on top of its cache:
an engine takes blocks for a request when it admits it from its queue, so under a long queue
trimming at send time would believe histories gone that are still there when their next turn
arrives (on a saturated replay, 487,000 tokens held against 14,000 believed, for the turns it
then placed elsewhere; docs/benchmark-history.md, session 17).
The leading run of a request's chunks found with a member is the prefix it probably holds: a
conversation's previous turn on its home, a shared system prompt and tools on every member that
served them, a RAG document wherever it went. It is a coarse radix tree over the router's own
traffic, like the trees of sglang-router and the block indexes of llm-d and Dynamo, but fed by
what was sent rather than by engine events.

Every figure is a guess: another router replica may have sent the member prompts that evicted
these, or sent this prompt elsewhere; an engine evicts blocks, not chunks. A wrong guess costs
one request a worse placement, never a wrong answer. The index is bounded in bytes (entries of
about ENTRY_BYTES, one per chunk and member holding it); a lookup costs one dictionary access
per chunk held plus one per member, a record one per chunk, never a scan.

What the index trims it does not forget at once: GHOSTS_SHARE of its bytes keeps, for each
trimmed chunk, the member it was trimmed from (`trimmed`), so that placement can send a
conversation back where its history went on a saturated pool, where that pays
(router.placement). This is not a belief that the member still holds it: the engines were
found to hold 4-12% of what the index had trimmed (docs/benchmark-history.md, sessions 32-33).
"""

from __future__ import annotations

import collections
import hashlib
import math
from collections.abc import Collection, Mapping

from kvpin.router.keys import Zones

CHUNK_CHARS = 2048  # routing.prefixChars by default: a head the key shares is a chunk here
HASH_BYTES = 8
ENTRY_BYTES = 120  # a name in a member's table or the ghosts: 119 by `kvpin bench router`
GHOSTS_SHARE = 0.25  # of the bytes, for names of trimmed chunks and the member they left


def head_chars(zones: Zones) -> int:
    """Where the conversation's own text begins in the prompt's stream of characters, after
    the system prompt, the tools and the first message's role (0 when it has no system prompt
    or tools): a member holding no more than this holds none of the conversation."""
    if not zones.system and not zones.tools:
        return 0
    role = len(zones.history[0][0]) + 1 if zones.history else 0  # "user\0"
    return len(zones.system) + len(zones.tools) + 2 + role  # each zone ends with a separator


def first_turn_chars(zones: Zones) -> int:
    """Where the first message ends in that stream: the size of the conversation's first turn
    (its head and its opening message), which a later turn still carries."""
    return head_chars(zones) + (len(zones.history[0][1]) if zones.history else 0)


def chunk_names(zones: Zones) -> bytes:
    """The names of a prompt's whole chunks, concatenated (HASH_BYTES each)."""
    h = hashlib.blake2b(digest_size=HASH_BYTES)
    out = bytearray()
    filled = 0
    pieces = [zones.system, "\x1f", zones.tools, "\x1f"]
    for role, text in zones.history:
        pieces += (role, "\0", text, "\x1e")
    for text in pieces:
        start = 0
        while start < len(text):
            end = min(len(text), start + CHUNK_CHARS - filled)
            h.update(text[start:end].encode("utf-8", "surrogatepass"))
            filled += end - start
            start = end
            if filled == CHUNK_CHARS:
                out += h.copy().digest()
                filled = 0
    return bytes(out)


class Holdings:
    """For each member, the chunks it was sent, least recent first, bounded in bytes."""

    def __init__(self, max_bytes: int = 32 * 2**20) -> None:
        self.max_entries = max(1, int(max_bytes * (1 - GHOSTS_SHARE)) // ENTRY_BYTES)
        self._capacity: dict[str, float] = {}  # chunks each member's cache holds, where known
        self._unadmitted: dict[str, float] = {}  # chunks sent to each, not yet in its cache
        self._sent: dict[str, collections.OrderedDict[bytes, None]] = {}
        self.max_ghosts = int(max_bytes * GHOSTS_SHARE) // ENTRY_BYTES
        self._ghosts: collections.OrderedDict[bytes, str] = collections.OrderedDict()

    @staticmethod
    def _names(scope: bytes, chunks: bytes) -> list[bytes]:
        return [scope + chunks[i : i + HASH_BYTES] for i in range(0, len(chunks), HASH_BYTES)]

    def held(self, scope: bytes, chunks: bytes) -> dict[str, int]:
        """For each member holding some, how many leading chunks of this prompt it holds.

        `scope` keeps prompts that can never share cache apart (different cache salts).
        """
        names = self._names(scope, chunks)
        out = {}
        for member, sent in self._sent.items():
            n = 0
            while n < len(names) and names[n] in sent:
                n += 1
            if n:
                out[member] = n
        return out

    def trimmed(self, scope: bytes, chunks: bytes, held: Mapping[str, int]) -> dict[str, int]:
        """For each member, how many chunks of this prompt right after its `held` run the
        index trimmed from it: where that much more of it went (why: the module's docstring)."""
        names = self._names(scope, chunks)
        first = self._ghosts.get(names[0]) if names else None
        out = {}
        for member in held.keys() | ({first} if first else set()):
            n = start = held.get(member, 0)
            while n < len(names) and self._ghosts.get(names[n]) == member:
                n += 1
            if n > start:
                out[member] = n - start
        return out

    def record(self, scope: bytes, chunks: bytes, member: str) -> list[bytes]:
        """`member` is being sent a prompt with these chunks: it holds them from now on.

        Recorded when the prompt is sent, not when the answer ends, so that a burst of
        requests sharing a prefix follows the first one (the engine computes the prefix once
        and the others queue behind it). Returns the names `member` did not hold before, for
        `retract` if the engine refuses the request.
        """
        sent = self._sent.setdefault(member, collections.OrderedDict())
        added = []
        for name in reversed(self._names(scope, chunks)):  # the prefix ends most recent
            if name in sent:
                sent.move_to_end(name)
            else:
                sent[name] = None
                added.append(name)
                self._ghosts.pop(name, None)
        self._trim(member, sent)
        return added

    def resize(self, member: str, chunks: float) -> None:
        """`member`'s cache holds this many chunks (from its metrics, or configured)."""
        if self._capacity.get(member) != chunks:
            self._capacity[member] = chunks
            if member in self._sent:
                self._trim(member, self._sent[member])

    def admitting(self, member: str, chunks: float) -> None:
        """`member` was sent prompts of this many uncached chunks that it has not prefilled
        yet: room on top of its cache, until it admits them (why: the module's docstring)."""
        if self._unadmitted.get(member, 0.0) != chunks:
            self._unadmitted[member] = chunks
            if member in self._sent:
                self._trim(member, self._sent[member])

    def _trim(self, member: str, sent: collections.OrderedDict[bytes, None]) -> None:
        """Drop what `member` has evicted by now, and its share of the table's bound."""
        cache = self._capacity.get(member, math.inf) + self._unadmitted.get(member, 0.0)
        room = min(cache, self.max_entries / len(self._sent))
        while len(sent) > max(1, room):
            name, _ = sent.popitem(last=False)
            if self.max_ghosts:
                self._ghosts[name] = member
                self._ghosts.move_to_end(name)
                if len(self._ghosts) > self.max_ghosts:
                    self._ghosts.popitem(last=False)

    def retract(self, names: Collection[bytes], member: str) -> None:
        """The prompt `record` returned these names for never reached `member`'s cache."""
        sent = self._sent.get(member)
        if sent is not None:
            for name in names:
                sent.pop(name, None)

    def forget(self, members: Collection[str]) -> None:
        """Members that left hold nothing any more."""
        for member in members:
            self._sent.pop(member, None)
            self._capacity.pop(member, None)
            self._unadmitted.pop(member, None)
        left = set(members)
        for name in [n for n, m in self._ghosts.items() if m in left]:
            del self._ghosts[name]

    def __len__(self) -> int:
        return sum(map(len, self._sent.values()))

    @property
    def ghosts(self) -> int:
        """Trimmed chunks remembered with the member they left (trimmed)."""
        return len(self._ghosts)
