import pytest

from kvpin.bench import workloads

SMALL = workloads.WorkloadConfig(
    variant="agents", conversations=12, turns=4, agents=3, system_words=50, user_words=10
)


def test_the_same_seed_gives_the_same_workload() -> None:
    assert workloads.generate(SMALL) == workloads.generate(SMALL)
    other = workloads.generate(workloads.WorkloadConfig(**{**SMALL.__dict__, "seed": 8}))
    assert other != workloads.generate(SMALL)


def test_every_turn_extends_the_previous_request() -> None:
    workload = workloads.generate(SMALL)
    for conversation in workload.conversations:
        answers: list[str] = []
        previous = None
        for turn in range(SMALL.turns):
            body = workloads.build_request(workload, conversation, answers)
            if previous is not None:
                assert body["messages"][: len(previous["messages"])] == previous["messages"]
                assert body["tools"] == previous["tools"]
            previous = body
            assert body["messages"][-1]["content"] == conversation.user_turns[turn]
            previous["messages"] = [*body["messages"], {"role": "assistant", "content": f"a{turn}"}]
            answers.append(f"a{turn}")


def test_variants() -> None:
    shared = workloads.generate(workloads.WorkloadConfig(**{**SMALL.__dict__, "variant": "shared"}))
    assert len(shared.agents) == 1
    long = workloads.generate(workloads.WorkloadConfig(**{**SMALL.__dict__, "variant": "long"}))
    assert len(long.agents[0].system) > 3 * len(workloads.generate(SMALL).agents[0].system)
    careless = workloads.generate(
        workloads.WorkloadConfig(**{**SMALL.__dict__, "variant": "careless"})
    )
    conv = careless.conversations[0]
    a = workloads.build_request(careless, conv, [], clock="12:00:01")
    b = workloads.build_request(careless, conv, ["x"], clock="12:00:02")
    assert a["messages"][0] != b["messages"][0]  # the careless client breaks its own prefix
    with pytest.raises(ValueError, match="variant"):
        workloads.generate(workloads.WorkloadConfig(variant="nope"))


def test_endpoint_popularity_is_skewed() -> None:
    config = workloads.WorkloadConfig(conversations=400, endpoints=4, skew=1.2)
    counts = [0] * 4
    for conversation in workloads.generate(config).conversations:
        counts[int(conversation.endpoint.split("-")[1])] += 1
    assert counts[0] > counts[1] > counts[3] > 0


AGENTIC = workloads.WorkloadConfig(conversations=200, turns=5, arrival_rate=4.0, think_s=2.0)


def test_agentic_conversations_arrive_open_loop_and_grow_by_tool_results() -> None:
    workload = workloads.generate(AGENTIC)
    arrivals = [c.arrival_s for c in workload.conversations]
    assert arrivals == sorted(arrivals) and 40 < arrivals[-1] < 60  # ~200 / 4 per second
    lengths = sorted(len(c.user_turns) for c in workload.conversations)
    assert lengths[len(lengths) // 2] in (4, 5, 6) and lengths[-1] >= 3 * 5  # a long tail
    later = [len(t.split()) for c in workload.conversations for t in c.user_turns[1:]]
    assert min(later) >= 150 and max(later) > 1000  # tool results of hundreds to thousands
    thinks = [s for c in workload.conversations for s in c.think_s]
    assert 1.5 < sum(thinks) / len(thinks) < 2.5


def test_bursts_keep_the_mean_rate() -> None:
    bursty = workloads.generate(workloads.WorkloadConfig(**{**AGENTIC.__dict__, "burst": True}))
    arrivals = [c.arrival_s for c in bursty.conversations]
    assert len(set(arrivals)) == len(arrivals) // workloads.BURST_SIZE  # 8 at a time
    assert 25 < arrivals[-1] < 90


def test_the_working_set_counts_only_live_conversations() -> None:
    workload = workloads.generate(AGENTIC)
    live = workloads.working_set(workload, turn_s=0.3)
    everything = sum(
        len(workload.agents[c.agent].system.split()) + sum(len(t.split()) for t in c.user_turns)
        for c in workload.conversations
    )
    assert 0 < live.peak_tokens < 0.6 * everything  # conversations come and go
    assert 2 < live.live_conversations < 200
    text = live.describe(4, 3 * live.peak_tokens // 8)
    assert "1.5x the partitioned share" in text and "0.38x everything" in text
