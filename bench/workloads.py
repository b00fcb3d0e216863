"""Agent conversations for benchmarks: deterministic for a seed, append-only per conversation.

Pure. An agent's request has three zones: a system prompt (fixed per agent), tool schemas
(fixed per agent) and a history that only grows: each turn appends the assistant's previous
answer and a new user message. Variants:

- `agents`: many distinct agents (system prompts and tools), conversations spread over them;
- `shared`: one system prompt and tool set for every conversation;
- `long`: few agents with long system prompts and long user turns (RAG-like contexts);
- `careless`: like `agents`, but the client writes the current time into its system prompt
  each turn, which breaks every prefix (the router's prefix-break metric catches it).

Endpoints: conversations are spread over `endpoints` with Zipf-skewed popularity.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from typing import Any

VARIANTS = ("agents", "shared", "long", "careless")
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

    variant: str = "agents"
    conversations: int = 48
    turns: int = 6
    agents: int = 6
    system_words: int = 600
    tool_count: int = 4
    user_words: int = 40
    answer_tokens: int = 24
    endpoints: int = 1
    skew: float = 1.1
    """Zipf exponent of endpoint popularity (0: uniform)."""
    seed: int = 7


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
