"""What each member probably holds in its KV cache, from what the router sent it.

Pure (bounded tables, no I/O, no clock). Two tables, each a least-recently-used map bounded by
an estimate of its bytes:

- conversations: where each conversation was last sent and how long its prompt was then. The
  next turn extends that prompt, so its home holds that many of its tokens;
- heads: which members recently served each routing key's head (a shared system prompt and
  tools, or the first turn) and how many tokens it is. A new conversation with a known head
  finds that much cached on those members.

Every figure is a guess: the engine may have evicted the blocks, or another router replica may
have sent the conversation elsewhere since. A wrong guess costs one request a worse placement,
never a wrong answer, and the next turn corrects it. Each lookup and record is O(1).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Collection

CONVERSATION_BYTES = 200  # one entry: a 16-hex-digit key, a shared member name, a small int
HEAD_BYTES = 400  # one entry with up to a few members
MAX_HEAD_MEMBERS = 4  # a head popular enough to live on more members is everywhere anyway


@dataclasses.dataclass(frozen=True)
class Held:
    """A guess of what one member holds of one request."""

    conversation: tuple[str, int] | None  # (home member, tokens of its last prompt)
    head: dict[str, int]  # member -> head tokens


class Holdings:
    """The router's guesses of cache contents, bounded in bytes."""

    def __init__(self, max_bytes: int = 32 * 2**20) -> None:
        self.max_conversations = max(1, max_bytes * 3 // 4 // CONVERSATION_BYTES)
        self.max_heads = max(1, max_bytes // 4 // HEAD_BYTES)
        self._conversations: collections.OrderedDict[str, tuple[str, int]] = (
            collections.OrderedDict()
        )
        self._heads: collections.OrderedDict[str, dict[str, int]] = collections.OrderedDict()

    def lookup(self, conversation: str, head: str) -> Held:
        """What is known of a conversation and a head (the entries count as used)."""
        home = self._conversations.get(conversation)
        if home is not None:
            self._conversations.move_to_end(conversation)
        members = self._heads.get(head)
        if members is not None:
            self._heads.move_to_end(head)
        return Held(home, dict(members or {}))

    def record(
        self, conversation: str, head: str, member: str, tokens: int, head_tokens: int
    ) -> None:
        """`member` now holds this conversation's prompt of `tokens` and its head."""
        self._conversations[conversation] = (member, tokens)
        self._conversations.move_to_end(conversation)
        if len(self._conversations) > self.max_conversations:
            self._conversations.popitem(last=False)
        members = self._heads.setdefault(head, {})
        self._heads.move_to_end(head)
        members.pop(member, None)
        members[member] = head_tokens  # the most recent last
        while len(members) > MAX_HEAD_MEMBERS:
            del members[next(iter(members))]
        if len(self._heads) > self.max_heads:
            self._heads.popitem(last=False)

    def forget(self, prefix: str, members: Collection[str]) -> None:
        """Members that left hold nothing any more (entries whose keys start with `prefix`:
        the proxy keys both tables by endpoint first)."""
        gone = set(members)
        stale = [
            k for k, (m, _) in self._conversations.items() if m in gone and k.startswith(prefix)
        ]
        for key in stale:
            del self._conversations[key]
        for key, held in self._heads.items():
            if key.startswith(prefix):
                for member in gone & held.keys():
                    del held[member]

    def __len__(self) -> int:
        return len(self._conversations)
