"""Agent conversations for benchmarks: deterministic for a seed, append-only per conversation.

Pure. An agent's request has three zones: a system prompt (fixed per agent), tool schemas
(fixed per agent) and a history that only grows: each turn appends the assistant's previous
answer and a new user message. Variants:

- `agentic` (the default): agent traffic as it is lived. Conversations arrive open loop
  (Poisson, or in bursts with `burst`), each turn appends a tool result of hundreds to
  thousands of tokens and the user's next message, the agent thinks between turns, and
  conversation lengths have a long tail; many more conversations are live at once than there
  are pods, so the live histories fit the pool's caches when partitioned and not when every pod
  holds everything (`working_set` gives the arithmetic);
- `agents`: many distinct agents (system prompts and tools), conversations spread over them;
- `shared`: one system prompt and tool set for every conversation;
- `long`: few agents with long system prompts and long user turns (RAG-like contexts);
- `careless`: like `agents`, but the client writes the current time into its system prompt
  each turn, which breaks every prefix (the router's prefix-break metric catches it).

Endpoints: conversations are spread over `endpoints` with Zipf-skewed popularity.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence
from typing import Any

VARIANTS = ("agentic", "agents", "shared", "long", "careless")
BURST_SIZE = 8
_VOCABULARY = [
    "order",
    "shipping",
    "refund",
    "invoice",
    "account",
    "password",
    "delivery",
    "warranty",
    "product",
    "size",
    "color",
    "address",
    "payment",
    "card",
    "bank",
    "transfer",
    "receipt",
    "discount",
    "coupon",
    "return",
    "exchange",
    "tracking",
    "package",
    "courier",
    "store",
    "branch",
    "schedule",
    "meeting",
    "report",
    "budget",
    "forecast",
    "revenue",
    "cost",
    "margin",
    "customer",
    "supplier",
    "contract",
    "clause",
    "policy",
    "compliance",
    "audit",
    "risk",
    "incident",
    "ticket",
    "priority",
]


@dataclasses.dataclass(frozen=True)
class WorkloadConfig:
    """The shape of a workload."""

    variant: str = "agentic"
    conversations: int = 48
    turns: int = 6
    """Turns of each conversation (agentic: the median; lengths have a long tail)."""
    agents: int = 6
    system_words: int = 600
    tool_count: int = 4
    user_words: int = 40
    answer_tokens: int = 24
    endpoints: int = 1
    skew: float = 1.1
    """Zipf exponent of endpoint popularity (0: uniform)."""
    seed: int = 7
    arrival_rate: float = 2.0
    """agentic: conversations starting per second (Poisson)."""
    burst: bool = False
    """agentic: conversations arrive in bursts of about 8 at once, at the same mean rate."""
    think_s: float = 1.0
    """agentic: mean pause between an answer and the next turn (a user reading, a tool)."""
    tool_words: tuple[int, int] = (150, 1500)
    """agentic: size range of the tool result appended each turn (log-uniform)."""


@dataclasses.dataclass(frozen=True)
class Agent:
    """What stays the same in every request of one agent."""

    system: str
    tools: tuple[dict[str, Any], ...]


@dataclasses.dataclass(frozen=True)
class Conversation:
    """One conversation: its endpoint, agent and the user's message of each turn."""

    id: str
    endpoint: str
    agent: int
    user_turns: tuple[str, ...]
    arrival_s: float = 0.0  # agentic: when it starts, from the start of the run
    think_s: tuple[float, ...] = ()  # agentic: the pause before each later turn


@dataclasses.dataclass(frozen=True)
class Workload:
    """Agents and conversations, ready to replay."""

    config: WorkloadConfig
    agents: tuple[Agent, ...]
    conversations: tuple[Conversation, ...]

    @property
    def endpoints(self) -> tuple[str, ...]:
        return tuple(f"ep-{i}" for i in range(self.config.endpoints))


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_VOCABULARY) for _ in range(n))


def _tool(rng: random.Random, index: int) -> dict[str, Any]:
    props = {
        f"{rng.choice(_VOCABULARY)}_{k}": {"type": "string", "description": _words(rng, 8)}
        for k in range(4)
    }
    return {"type": "function", "function": {
        "name": f"tool_{index}_{rng.choice(_VOCABULARY)}", "description": _words(rng, 20),
        "parameters": {"type": "object", "properties": props}}}  # fmt: skip


def generate(config: WorkloadConfig) -> Workload:
    """The workload for a config (the same config always gives the same workload)."""
    if config.variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}")
    rng = random.Random(config.seed)
    n_agents = 1 if config.variant == "shared" else config.agents
    system_words = config.system_words * (4 if config.variant == "long" else 1)
    user_words = config.user_words * (8 if config.variant == "long" else 1)
    agents = tuple(
        Agent(
            system=f"You are agent {a}. " + _words(rng, system_words),
            tools=tuple(_tool(rng, t) for t in range(config.tool_count)),
        )
        for a in range(n_agents)
    )
    weights = [1 / (i + 1) ** config.skew for i in range(config.endpoints)]
    if config.variant == "agentic":
        return Workload(config, agents, _agentic(config, rng, weights, n_agents))
    conversations = tuple(
        Conversation(
            id=f"conv-{c}",
            endpoint=f"ep-{rng.choices(range(config.endpoints), weights)[0]}",
            agent=rng.randrange(n_agents),
            user_turns=tuple(
                f"[conversation {c}, turn {t}] " + _words(rng, user_words)
                for t in range(config.turns)
            ),
        )
        for c in range(config.conversations)
    )
    return Workload(config, agents, conversations)


def _agentic(
    config: WorkloadConfig, rng: random.Random, weights: list[float], n_agents: int
) -> tuple[Conversation, ...]:
    """Open-loop conversations: arrival times, long-tailed lengths, tool results, think time."""
    low, high = config.tool_words
    rate = config.arrival_rate / (BURST_SIZE if config.burst else 1)
    clock, out = 0.0, []
    for c in range(config.conversations):
        if not config.burst or c % BURST_SIZE == 0:
            clock += rng.expovariate(rate)
        # a median of `turns`, a tail of conversations several times longer
        turns = min(4 * config.turns, max(1, round(config.turns * 0.7 * rng.paretovariate(1.5))))
        user_turns = []
        for t in range(turns):
            tool = round(math.exp(rng.uniform(math.log(low), math.log(high))))
            result = f"[conversation {c}, turn {t}] tool output: " if t else ""
            user_turns.append(result + (_words(rng, tool) + "\n\n" if t else "")
                              + _words(rng, config.user_words))  # fmt: skip
        out.append(Conversation(
            id=f"conv-{c}", endpoint=f"ep-{rng.choices(range(config.endpoints), weights)[0]}",
            agent=rng.randrange(n_agents), user_turns=tuple(user_turns), arrival_s=clock,
            think_s=tuple(rng.expovariate(1 / config.think_s) for _ in range(turns)),
        ))  # fmt: skip
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class WorkingSet:
    """How much history is live at the busiest moment, in tokens (about one per word)."""

    peak_tokens: int
    live_conversations: int

    def describe(self, pods: int, cache_tokens: int) -> str:
        share = self.peak_tokens / pods
        return (
            f"live working set at its peak: {self.live_conversations} conversations, "
            f"~{self.peak_tokens:,} tokens; partitioned over {pods} pods ~{share:,.0f} each; "
            f"cache per pod {cache_tokens:,} tokens = {cache_tokens / share:.1f}x the "
            f"partitioned share, {cache_tokens / self.peak_tokens:.2f}x everything"
        )


def working_set(workload: Workload, *, turn_s: float) -> WorkingSet:
    """The peak of live history over time, each turn taking `turn_s` plus its think time.

    An estimate for sizing caches (answers' lengths and queueing are left out): a
    conversation holds its whole prompt so far from its first turn to its last.
    """
    events = []
    for conv in workload.conversations:
        agent = workload.agents[conv.agent]
        tokens = len(agent.system.split()) + 60 * len(agent.tools)
        t = conv.arrival_s
        for turn, text in enumerate(conv.user_turns):
            t += turn_s + (conv.think_s[turn] if turn else 0.0)
            tokens += len(text.split()) + workload.config.answer_tokens
        events += [(conv.arrival_s, 1, tokens), (t, -1, tokens)]
    live = peak = count = peak_count = 0
    for _, step, tokens in sorted(events):
        live += step * tokens
        count += step
        if live > peak:
            peak, peak_count = live, count
    return WorkingSet(peak, peak_count)


def build_request(
    workload: Workload,
    conversation: Conversation,
    answers: Sequence[str],
    *,
    clock: str = "",
) -> dict[str, Any]:
    """The body of the conversation's next turn, given the answers it has received so far.

    `clock` is what a careless client writes into its system prompt (the `careless` variant).
    """
    agent = workload.agents[conversation.agent]
    system = agent.system
    if workload.config.variant == "careless":
        system = f"Current time: {clock}. {system}"
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for turn, answer in enumerate(answers):
        messages.append({"role": "user", "content": conversation.user_turns[turn]})
        messages.append({"role": "assistant", "content": answer})
    messages.append({"role": "user", "content": conversation.user_turns[len(answers)]})
    return {
        "model": conversation.endpoint,
        "messages": messages,
        "tools": list(agent.tools),
        "max_tokens": workload.config.answer_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
