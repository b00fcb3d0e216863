import pytest

from kvpin.operator import spec
from tests import crd, factories


def schema_default(path: str) -> object:
    node = crd.spec_schema()
    for name in path.split("."):
        node = node["properties"][name]
    return node["default"]


def test_defaults_match_the_schema() -> None:
    """An object the API server did not default (an old one, a dry run) parses the same as
    one it did: every default here is the CRD's."""
    body = factories.endpoint()
    del body["spec"]["engine"], body["spec"]["gpu"], body["spec"]["replicas"]
    del body["metadata"]["namespace"]
    parsed = spec.parse(body)
    assert parsed.endpoint_id == "ep-test"  # the object's name
    assert parsed.namespace == "default"
    assert parsed.vram_reservation_bytes == 2**30
    assert parsed.engine == spec.EngineSpec(
        preset=schema_default("engine.preset"), image=None, command=(), args=(),
        port=schema_default("engine.port"), health_path=schema_default("engine.healthPath"),
    )  # fmt: skip
    assert (parsed.replicas, parsed.gpu.count, parsed.gpu.resource_name) == (
        schema_default("replicas"), schema_default("gpu.count"),
        schema_default("gpu.resourceName"),
    )  # fmt: skip
    assert (parsed.gpu.product, parsed.gpu.memory_bytes, parsed.gpu.node_selector,
            parsed.gpu.tolerations) == (None, None, (), ())  # fmt: skip
    assert parsed.routing == spec.RoutingSpec(
        schema_default("routing.key"), schema_default("routing.loadFactor"),
        schema_default("routing.virtualNodes"), schema_default("routing.sessionHeader"),
    )  # fmt: skip
    assert parsed.drain == spec.DrainSpec(
        schema_default("drain.leaveRingSeconds"), schema_default("drain.gracePeriodSeconds")
    )
    assert parsed.progress_deadline_s == schema_default("progressDeadlineSeconds")
    assert parsed.pod.shm_size == schema_default("pod.shmSize")


def test_given_values_are_kept() -> None:
    parsed = spec.parse(factories.endpoint(
        engine={"preset": "sglang", "image": "lmsys/sglang:1", "command": ["python3"],
                "args": ["--x"], "port": 30000, "healthPath": "/healthz"},
        gpu={"count": 2, "resourceName": "amd.com/gpu", "memory": "192Gi",
             "nodeSelector": {"zone": "b", "pool": "mi300"},
             "tolerations": [{"key": "gpu", "operator": "Exists"}]},
        routing={"key": "session", "loadFactor": 1.5, "virtualNodes": 40,
                 "sessionHeader": "X-Conversation"},
        drain={"leaveRingSeconds": 5, "gracePeriodSeconds": 60},
        progressDeadlineSeconds=600, endpointId="support",
    ))  # fmt: skip
    assert parsed.engine == spec.EngineSpec("sglang", "lmsys/sglang:1", ("python3",), ("--x",),
                                            30000, "/healthz")  # fmt: skip
    assert parsed.gpu == spec.GpuSpec(2, "amd.com/gpu", None, 192 * 2**30,
                                      (("pool", "mi300"), ("zone", "b")),
                                      ({"key": "gpu", "operator": "Exists"},))  # fmt: skip
    assert parsed.routing == spec.RoutingSpec("session", 1.5, 40, "X-Conversation")
    assert parsed.drain == spec.DrainSpec(5, 60)
    assert (parsed.progress_deadline_s, parsed.endpoint_id) == (600, "support")


def test_known_product_gives_gpu_memory() -> None:
    body = factories.endpoint(
        engine={"preset": "vllm"}, gpu={"count": 2, "product": "NVIDIA-A100-SXM4-80GB"}
    )
    assert spec.parse(body).gpu.memory_bytes == 80 * 2**30  # nvidia-smi: 81,920 MiB


# Every refusal, with the whole message a user reads in the Degraded condition and the Event.
@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({'replicas': -1}, 'spec.replicas must be at least 0'),
        ({'replicas': '3'}, 'spec.replicas must be a whole number'),
        ({'replicas': True}, 'spec.replicas must be a whole number'),
        ({'vramReservation': 'forty gigs'}, "spec.vramReservation: not a quantity: 'forty gigs' (examples: 40Gi, 500Mi, 8G)"),
        ({'vramReservation': '0'}, 'spec.vramReservation must be positive'),
        ({'vramReservation': None}, 'spec.vramReservation is required, e.g. 40Gi'),
        ({'engine': {'preset': 'tgi'}}, "spec.engine.preset 'tgi' is not one of vllm, sglang, sim, custom"),
        ({'endpointId': 'EP_Support'}, "spec.endpointId 'EP_Support' must be a DNS label (a-z, 0-9, '-')"),
        ({'endpointId': 'e' * 64}, f"spec.endpointId '{'e' * 64}' must be a DNS label (a-z, 0-9, '-')"),
        ({'engine': {'preset': 'custom'}}, 'spec.engine.preset custom needs spec.engine.image'),
        ({'engine': {'preset': 'vllm'}, 'gpu': {'count': 0}}, 'spec.gpu.count must be at least 1 for the vllm engine'),
        ({'engine': {'preset': 'sglang'}, 'gpu': {'count': 0}}, 'spec.gpu.count must be at least 1 for the sglang engine'),
        ({'engine': {'port': 65536}}, 'spec.engine.port must be at most 65535'),
        ({'engine': {'port': 0}}, 'spec.engine.port must be at least 1'),
        ({'engine': {'command': 'vllm serve'}}, 'spec.engine.command must be a list of strings'),
        ({'engine': {'args': [1]}}, 'spec.engine.args must be a list of strings'),
        ({'engine': 'vllm'}, 'spec.engine must be an object'),
        ({'routing': {'loadFactor': 0.5}}, 'spec.routing.loadFactor must be at least 1.0'),
        ({'routing': {'loadFactor': '2'}}, 'spec.routing.loadFactor must be a number'),
        ({'routing': {'loadFactor': True}}, 'spec.routing.loadFactor must be a number'),
        ({'routing': {'key': 'random'}}, "spec.routing.key 'random' is not one of prefix, session, endpoint"),
        ({'routing': {'virtualNodes': 0}}, 'spec.routing.virtualNodes must be at least 1'),
        ({'routing': []}, 'spec.routing must be an object'),
        ({'model': ''}, 'spec.model is required: the model the engine serves'),
        ({'model': 7}, 'spec.model is required: the model the engine serves'),
        ({'pod': {'env': 'A=B'}}, 'spec.pod.env must be a list of objects'),
        ({'pod': {'resources': {'limits': {'memory': 'a lot'}}}}, "spec.pod.resources.limits.memory: 'a lot' is not a quantity (examples: 2, 500m, 16Gi)"),
        ({'pod': {'resources': {'requests': {'cpu': True}}}}, 'spec.pod.resources.requests.cpu: True is not a quantity (examples: 2, 500m, 16Gi)'),
        ({'pod': {'resources': []}}, 'spec.pod.resources must be an object'),
        ({'pod': {'labels': ['a']}}, 'spec.pod.labels must be an object'),
        ({'pod': {'annotations': 'a'}}, 'spec.pod.annotations must be an object'),
        ({'pod': {'shmSize': '0'}}, 'spec.pod.shmSize: must be positive'),
        ({'pod': {'shmSize': 'big'}}, "spec.pod.shmSize: not a quantity: 'big' (examples: 40Gi, 500Mi, 8G)"),
        ({'pod': {'volumes': [1]}}, 'spec.pod.volumes must be a list of objects'),
        ({'pod': {'affinity': []}}, 'spec.pod.affinity must be an object'),
        ({'drain': {'leaveRingSeconds': -1}}, 'spec.drain.leaveRingSeconds must be at least 0'),
        ({'drain': {'gracePeriodSeconds': 0}}, 'spec.drain.gracePeriodSeconds must be at least 1'),
        ({'drain': {'gracePeriodSeconds': 3601}}, 'spec.drain: at most 3600 seconds each'),
        ({'drain': {'leaveRingSeconds': 3601}}, 'spec.drain: at most 3600 seconds each'),
        ({'progressDeadlineSeconds': 0}, 'spec.progressDeadlineSeconds must be at least 1'),
        ({'gpu': {'memory': 'lots'}}, "spec.gpu.memory: not a quantity: 'lots' (examples: 40Gi, 500Mi, 8G)"),
        ({'gpu': {'nodeSelector': ['a']}}, 'spec.gpu.nodeSelector must be an object'),
        ({'gpu': {'tolerations': {'key': 'a'}}}, 'spec.gpu.tolerations must be a list of tolerations'),
        ({'gpu': {'tolerations': ['a']}}, 'spec.gpu.tolerations must be a list of tolerations'),
        ({'gpu': {'count': -1}}, 'spec.gpu.count must be at least 0'),
        ({'vramReservation': '100Gi', 'gpu': {'count': 1, 'product': 'NVIDIA-L4'}}, "spec.vramReservation 100Gi does not fit: 100Gi of KV cache, more than the 21.3Gi usable of the pod's GPU memory (95% of 1 x 22.5Gi NVIDIA-L4); at most 21.3Gi of KV cache fits"),
        ({'vramReservation': '100Gi', 'gpu': {'count': 2, 'memory': '40Gi'}}, "spec.vramReservation 100Gi does not fit: 100Gi of KV cache, more than the 76Gi usable of the pod's GPU memory (95% of 2 x 40Gi); at most 76Gi of KV cache fits"),
        ({'model': 'meta-llama/Llama-3.1-8B-Instruct', 'vramReservation': '70Gi', 'gpu': {'count': 1, 'product': 'NVIDIA-A100-SXM4-80GB'}}, "spec.vramReservation 70Gi does not fit: 70Gi of KV cache + 15Gi of weights (meta-llama/Llama-3.1-8B-Instruct in bf16) = 85Gi, more than the 76Gi usable of the pod's GPU memory (95% of 1 x 80Gi NVIDIA-A100-SXM4-80GB); at most 61Gi of KV cache fits"),
        ({'weightsMemory': '140Gi', 'vramReservation': '1Gi', 'gpu': {'count': 1, 'product': 'NVIDIA-H100-80GB-HBM3'}}, "spec.vramReservation 1Gi does not fit: 1Gi of KV cache + 140Gi of weights (spec.weightsMemory) = 141Gi, more than the 75.6Gi usable of the pod's GPU memory (95% of 1 x 79.6Gi NVIDIA-H100-80GB-HBM3); the weights alone do not fit"),
        ({'vramReservation': '20Gi', 'gpu': {'count': 1, 'resourceName': 'nvidia.com/mig-3g.20gb', 'product': 'NVIDIA-A100-SXM4-40GB'}}, "spec.vramReservation 20Gi does not fit: 20Gi of KV cache, more than the 17.6Gi usable of the pod's GPU memory (95% of 1 x 18.6Gi NVIDIA-A100-SXM4-40GB); at most 17.6Gi of KV cache fits"),
        ({'engine': {'hubTokenSecret': {'key': 'k'}}}, 'spec.engine.hubTokenSecret needs the Secret\'s name (and a key, default token)'),
        ({'engine': {'hubTokenSecret': 'hf'}}, 'spec.engine.hubTokenSecret must be an object'),
        ({'pod': {'livenessProbe': 'fast'}}, 'spec.pod.livenessProbe must be an object'),
        ({'pod': {'volumeClaimTemplates': [{'metadata': {'name': 'Models'}}]}}, 'spec.pod.volumeClaimTemplates[0].metadata.name must be a DNS label'),
        ({'pod': {'volumeClaimTemplates': [{'spec': {}}]}}, 'spec.pod.volumeClaimTemplates[0].metadata.name must be a DNS label'),
        ({'pod': {'volumeClaimTemplates': {'name': 'x'}}}, 'spec.pod.volumeClaimTemplates must be a list of objects'),
        ({'weightsMemory': 'big'}, "spec.weightsMemory: not a quantity: 'big' (examples: 40Gi, 500Mi, 8G)"),
        ({'weightsMemory': '0'}, 'spec.weightsMemory must be positive'),
    ],
)  # fmt: skip
def test_rejects_what_cannot_be_served_saying_exactly_why(override: dict, message: str) -> None:
    body = factories.endpoint(**override)
    with pytest.raises(spec.SpecError) as refused:
        spec.parse(body)
    assert str(refused.value) == message


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"metadata": [], "spec": {}}, "metadata must be an object"),
        ({"metadata": {"name": "x"}, "spec": "a"}, "spec must be an object"),
    ],
)
def test_rejects_a_body_that_is_not_an_object(body: dict, message: str) -> None:
    with pytest.raises(spec.SpecError) as refused:
        spec.parse(body)
    assert str(refused.value) == message


@pytest.mark.parametrize(
    "override",
    [
        {"endpointId": "e" * 63},
        {"replicas": 0},
        {"routing": {"loadFactor": 1}},
        {"routing": {"virtualNodes": 1}},
        {"engine": {"preset": "sim", "port": 65535}},
        {"drain": {"leaveRingSeconds": 0, "gracePeriodSeconds": 3600}},
        {"drain": {"leaveRingSeconds": 3600, "gracePeriodSeconds": 1}},
        {"progressDeadlineSeconds": 1},
        # 95% of an L4's 23,034 MiB, to the byte
        {"vramReservation": "22945254604", "gpu": {"count": 1, "product": "NVIDIA-L4"}},
        {
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "vramReservation": "61Gi",
            "gpu": {"count": 1, "product": "NVIDIA-A100-SXM4-80GB"},
        },
        {"engine": {"preset": "sim"}, "gpu": {"count": 0}},
        {"weightsMemory": "1"},
        {"engine": {"preset": "custom", "image": "my/engine:1"}, "gpu": {"count": 0}},
    ],
)
def test_accepts_the_limits_themselves(override: dict) -> None:
    spec.parse(factories.endpoint(**override))


def test_reservation_within_several_gpus_is_accepted() -> None:
    body = factories.endpoint(
        engine={"preset": "vllm"}, vramReservation="40Gi", gpu={"count": 2, "product": "NVIDIA-L4"}
    )
    assert spec.parse(body).vram_reservation_bytes == 40 * 2**30


def test_long_names_are_refused_before_statefulset_limits_bite() -> None:
    with pytest.raises(spec.SpecError, match="at most 52"):
        spec.parse(factories.endpoint("e" * 53))


def test_a_reservation_of_a_fraction_of_a_byte_is_a_spec_error() -> None:
    with pytest.raises(spec.SpecError, match=r"spec.vramReservation: '100m' is 0\.1 bytes"):
        spec.parse(factories.endpoint(vramReservation="100m"))
