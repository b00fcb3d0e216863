"""What each member probably holds in its KV cache, from what the router sent it.

Pure (a bounded table, no I/O, no clock). A prompt is read as a stream of characters (system,
tools, then each message with its role) cut into chunks of CHUNK_CHARS; chunk i is named by a
hash of everything up to its end, so two prompts share the names of exactly the chunks of the
prefix they share (router.bodies computes them with the rest of the summary). The table maps a
chunk name to the members that were last sent a prompt containing it (a few, most recent last),
so the leading run of a request's chunks found with a member is the prefix that member
probably holds: a conversation's previous turn on its home, a shared system prompt and tools on
every member that served them, a RAG document wherever it went. It is a coarse radix tree over
the router's own traffic, like the trees of sglang-router and the block indexes of llm-d and
Dynamo, but fed by what was sent rather than by engine events.

Every figure is a guess: the engine may have evicted the blocks, or another router replica may
have sent the prompt elsewhere since. A wrong guess costs one request a worse placement, never a
wrong answer. The table is bounded in bytes (entries of about ENTRY_BYTES, least recently
recorded dropped first); a lookup and a record cost one dictionary access per chunk of the
prompt (about 1,000 tokens each), never a scan of the table.
"""

from __future__ import annotations

import collections
import hashlib
from collections.abc import Collection

from kvpin.router.keys import Zones

CHUNK_CHARS = 4096
HASH_BYTES = 8
ENTRY_BYTES = 250  # a 16-byte key, a short list of shared member names, the table's own entry
MAX_MEMBERS = 4  # a chunk popular enough to live on more members is everywhere anyway


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
    """Chunk name -> members that probably hold it, bounded in bytes."""

    def __init__(self, max_bytes: int = 32 * 2**20) -> None:
        self.max_entries = max(1, max_bytes // ENTRY_BYTES)
        self._chunks: collections.OrderedDict[bytes, list[str]] = collections.OrderedDict()

    @staticmethod
    def _names(scope: bytes, chunks: bytes) -> list[bytes]:
        return [scope + chunks[i : i + HASH_BYTES] for i in range(0, len(chunks), HASH_BYTES)]

    def held(self, scope: bytes, chunks: bytes) -> dict[str, int]:
        """For each member, how many leading chunks of this prompt it probably holds.

        `scope` keeps prompts that can never share cache apart (different cache salts).
        """
        out: dict[str, int] = {}
        names = self._names(scope, chunks)
        alive: set[str] | None = None
        for i, name in enumerate(names):
            holders = set(self._chunks.get(name, ()))
            if alive is None:
                alive = holders
            for member in alive - holders:
                out[member] = i
            alive &= holders
            if not alive:
                return out
        out.update(dict.fromkeys(alive or (), len(names)))
        return out

    def record(self, scope: bytes, chunks: bytes, member: str) -> list[bytes]:
        """`member` is being sent a prompt with these chunks: it holds them from now on.

        Recorded when the prompt is sent, not when the answer ends, so that a burst of
        requests sharing a prefix follows the first one (the engine computes the prefix once
        and the others queue behind it). Returns the names `member` did not hold before, for
        `retract` if the engine refuses the request.
        """
        added = []
        for name in self._names(scope, chunks):
            members = self._chunks.get(name)
            if members is None:
                self._chunks[name] = [member]
                added.append(name)
            else:
                if member in members:
                    members.remove(member)
                else:
                    added.append(name)
                members.append(member)
                del members[:-MAX_MEMBERS]
                self._chunks.move_to_end(name)
        while len(self._chunks) > self.max_entries:
            self._chunks.popitem(last=False)
        return added

    def retract(self, names: Collection[bytes], member: str) -> None:
        """The prompt `record` returned these names for never reached `member`'s cache."""
        for name in names:
            members = self._chunks.get(name)
            if members is not None and member in members:
                members.remove(member)
                if not members:
                    del self._chunks[name]

    def forget(self, members: Collection[str]) -> None:
        """Members that left hold nothing any more (a scan: membership changes are rare)."""
        gone = set(members)
        for name in list(self._chunks):
            kept = [m for m in self._chunks[name] if m not in gone]
            if kept:
                self._chunks[name] = kept
            else:
                del self._chunks[name]

    def __len__(self) -> int:
        return len(self._chunks)
