import pytest

from kvpin.operator import spec
from tests import factories


def test_defaults_match_the_schema() -> None:
    body = factories.endpoint()
    del body["spec"]["engine"], body["spec"]["gpu"], body["spec"]["replicas"]
    parsed = spec.parse(body)
    assert parsed.endpoint_id == "ep-test"  # the object's name
    assert parsed.replicas == 1
    assert parsed.engine.preset == "vllm"
    assert parsed.engine.port == 8000
    assert parsed.gpu.count == 1
    assert parsed.gpu.resource_name == "nvidia.com/gpu"
    assert parsed.routing == spec.RoutingSpec("prefix", 2.0, 160, "X-Session-ID")
    assert parsed.vram_reservation_bytes == 2**30


def test_known_product_gives_gpu_memory() -> None:
    body = factories.endpoint(
        engine={"preset": "vllm"}, gpu={"count": 2, "product": "NVIDIA-A100-SXM4-80GB"}
    )
    assert spec.parse(body).gpu.memory_bytes == 80 * 2**30


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"replicas": -1}, "spec.replicas must be at least 0"),
        ({"replicas": "3"}, "spec.replicas must be a whole number"),
        ({"vramReservation": "forty gigs"}, "spec.vramReservation: not a quantity"),
        ({"vramReservation": "0"}, "must be positive"),
        ({"engine": {"preset": "tgi"}}, "spec.engine.preset 'tgi' is not one of"),
        ({"endpointId": "EP_Support"}, "must be a DNS label"),
        ({"engine": {"preset": "custom"}}, "needs spec.engine.image"),
        ({"engine": {"preset": "vllm"}, "gpu": {"count": 0}}, "at least 1 for the vllm engine"),
        ({"routing": {"loadFactor": 0.5}}, "loadFactor must be at least 1.0"),
        ({"routing": {"key": "random"}}, "spec.routing.key 'random'"),
        ({"model": ""}, "spec.model is required"),
        ({"pod": {"env": "A=B"}}, "spec.pod.env must be a list of objects"),
        (
            {"pod": {"resources": {"limits": {"memory": "a lot"}}}},
            "spec.pod.resources.limits.memory: 'a lot' is not a quantity",
        ),
        ({"drain": {"leaveRingSeconds": -1}}, "spec.drain.leaveRingSeconds must be at least 0"),
        ({"drain": {"gracePeriodSeconds": 0}}, "spec.drain.gracePeriodSeconds must be at least 1"),
        ({"drain": {"gracePeriodSeconds": 86400}}, "spec.drain: at most 3600 seconds"),
        (
            {"vramReservation": "100Gi", "gpu": {"count": 1, "product": "NVIDIA-L4"}},
            "larger than the pod's GPU memory (1 x 24Gi NVIDIA-L4)",
        ),
    ],
)
def test_rejects_what_cannot_be_served(override: dict, message: str) -> None:
    body = factories.endpoint(**override)
    with pytest.raises(spec.SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        spec.parse(body)


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
