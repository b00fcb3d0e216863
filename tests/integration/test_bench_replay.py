"""The benchmark's replays against real simulators on loopback: every turn sent and recorded,
conversations that grow, arrivals honoured, a failed turn ending its conversation."""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from typing import Any

from kvpin.bench import replay, targets, traces, workloads
from kvpin.sim.config import Faults
from tests.integration.conftest import StartSim

SMALL = workloads.WorkloadConfig(variant="agents", conversations=4, turns=3, agents=2,
                                 system_words=80, user_words=10, answer_tokens=4)  # fmt: skip


async def test_closed_loop_replay_sends_every_turn_and_each_grows_on_the_last(
    start_sim: StartSim,
) -> None:
    workload = workloads.generate(SMALL)
    sim = await start_sim(served_model_names=workload.endpoints)
    done = await replay.replay(
        workload, targets.Baseline("round-robin", {"ep-0": [sim]}), concurrency=2
    )
    assert len(done.records) == len(done.bodies) == 4 * 3
    assert all(r.ok for r in done.records)
    by_conversation: dict[str, list[dict]] = {}
    for body in done.bodies:
        key = body["messages"][1]["content"]  # the first user turn names the conversation
        by_conversation.setdefault(key, []).append(body)
    assert len(by_conversation) == 4
    for bodies in by_conversation.values():
        lengths = [len(b["messages"]) for b in bodies]
        assert lengths == sorted(lengths) and len(set(lengths)) == 3  # each turn adds to it
        for earlier, later in itertools.pairwise(bodies):
            assert later["messages"][: len(earlier["messages"])] == earlier["messages"]
    # one pod holds everything: every later turn (8 of them) finds its conversation cached
    assert sum(r.cached_tokens > 0 for r in done.records) >= 4 * 2
    assert done.makespan_s > 0


async def test_a_failed_turn_ends_its_conversation(start_sim: StartSim) -> None:
    workload = workloads.generate(SMALL)
    sim = await start_sim(served_model_names=workload.endpoints, faults=Faults(error_rate=1.0))
    done = await replay.replay(
        workload, targets.Baseline("round-robin", {"ep-0": [sim]}), concurrency=4
    )
    assert len(done.records) == 4  # the first turn of each, and nothing after it
    assert not any(r.ok for r in done.records)


async def test_open_loop_sessions_start_at_their_arrival_time(start_sim: StartSim) -> None:
    config = workloads.WorkloadConfig(conversations=3, turns=2, agents=1, system_words=40,
                                      user_words=5, answer_tokens=2, arrival_rate=2.0,
                                      think_s=0.5, tool_words=(10, 20))  # fmt: skip
    workload = workloads.generate(config)
    sim = await start_sim(served_model_names=workload.endpoints)
    speed = 4.0
    sent: dict[str, float] = {}

    class Recording(targets.Baseline):
        async def choose(self, endpoint: str, body: Mapping[str, Any]) -> str:
            sent.setdefault(body["messages"][1]["content"], time.monotonic() - started)
            return await super().choose(endpoint, body)

    started = time.monotonic()
    done = await replay.replay_sessions(
        workload, Recording("round-robin", {"ep-0": [sim]}), speed=speed
    )
    assert all(r.ok for r in done.records)
    assert len(done.records) == sum(len(c.user_turns) for c in workload.conversations)
    assert len(sent) == len(workload.conversations)
    for conversation in workload.conversations:
        # never early; late only by the machine's load
        assert sent[conversation.user_turns[0]] >= conversation.arrival_s / speed - 0.005


async def test_trace_replay_sends_each_request_and_shared_blocks_are_found_cached(
    start_sim: StartSim,
) -> None:
    requests = traces.synthetic(conversations=3, turns=2, duration_s=1.0, seed=3)
    sims = [await start_sim(served_model_names=("ep-0",), pod_name=f"p{i}") for i in range(2)]
    done = await replay.replay_trace(
        requests, "ep-0", targets.Baseline("round-robin", {"ep-0": sims}), speed=4.0
    )
    assert len(done.records) == len(requests)
    assert all(r.ok for r in done.records)
    assert {r.pod for r in done.records} == {"p0", "p1"}  # each answer names its pod
    assert sorted(r.request for r in done.records) == list(range(len(requests)))
    for record in done.records:  # and its body is the request of the trace it answered
        tokens = done.bodies[record.request]["max_tokens"]
        assert tokens == requests[record.request].output_length
    for record in done.records:
        assert record.prompt_tokens > 0
        assert record.cached_tokens <= record.prompt_tokens
    assert sum(r.cached_tokens for r in done.records) > 0  # later turns repeat their blocks
