import pytest

from kvpin.bench import workloads

SMALL = workloads.WorkloadConfig(
    conversations=12, turns=4, agents=3, system_words=50, user_words=10
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
