"""GPU memory, model weights and the arithmetic that checks a reservation against them."""

import pytest

from kvpin.operator import gpus, models, spec, vram
from tests import factories

MIB, GIB, GB = 2**20, 2**30, 10**9


@pytest.mark.parametrize(
    ("product", "resource", "size"),
    [
        ("NVIDIA-L4", "nvidia.com/gpu", 23_034 * MIB),  # less than 24 GiB: nvidia-smi's figure
        ("NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu", 81_920 * MIB),
        ("NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu", 81_559 * MIB),  # not 80 GiB
        ("NVIDIA-GH200-480GB", "nvidia.com/gpu", 97_871 * MIB),  # the 480 GB are the CPU's
        ("NVIDIA-Future-96GB", "nvidia.com/gpu", 96 * GB),  # unknown: the name's GB, decimal
        ("NVIDIA-future-96gb", "nvidia.com/gpu", 96 * GB),  # any case
        # MIG: the slice's profile, never the parent's memory (mixed and single strategies)
        ("NVIDIA-A100-SXM4-80GB", "nvidia.com/mig-1g.10gb", 10 * GB),
        ("NVIDIA-H100-80GB-HBM3", "nvidia.com/mig-3g.40gb", 40 * GB),
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "nvidia.com/gpu", 5 * GB),
        (None, "nvidia.com/mig-2g.20gb", 20 * GB),
        ("AMD-Instinct-MI300X", "amd.com/gpu", None),  # unknown: spec.gpu.memory says
        (None, "nvidia.com/gpu", None),
    ],
)
def test_gpu_memory_is_what_the_gpu_has(product: str | None, resource: str, size: int) -> None:
    assert gpus.memory_of(product, resource) == size


def test_known_models_weigh_their_parameters_in_bf16() -> None:
    assert models.weights_of("meta-llama/Llama-3.1-8B-Instruct") == 16_060_000_000
    assert models.weights_of("qwen/qwen2.5-7b-instruct") == 15_240_000_000  # any case
    assert models.weights_of(" Qwen/Qwen2.5-72B-Instruct ") == 145_400_000_000
    assert models.weights_of("/models/my-finetune") is None
    assert models.weights_of("TheBloke/Llama-2-7B-AWQ") is None  # quantized: not guessed


def memory(**override: object) -> vram.PodMemory:
    fields: dict = {"reservation": "40Gi", "kv_bytes": 40 * GIB, "gpus": 1, "gpu_bytes": 80 * GIB}
    return vram.PodMemory(**{**fields, **override})


def test_the_limit_is_exact_to_the_byte() -> None:
    usable = int(80 * GIB * vram.USABLE_FRACTION)
    assert vram.fit_error(memory(kv_bytes=usable - 10 * GIB, weights_bytes=10 * GIB)) is None
    refused = vram.fit_error(memory(kv_bytes=usable - 10 * GIB + 1, weights_bytes=10 * GIB,
                                    weights_source="spec.weightsMemory"))  # fmt: skip
    assert refused is not None and refused.endswith("at most 66Gi of KV cache fits")


def test_weights_that_fill_the_usable_memory_leave_no_room_at_all() -> None:
    usable = int(80 * GIB * vram.USABLE_FRACTION)
    refused = vram.fit_error(memory(kv_bytes=1, weights_bytes=usable, weights_source="w"))
    assert refused is not None and refused.endswith("; the weights alone do not fit")
    refused = vram.fit_error(memory(kv_bytes=2, weights_bytes=usable - 1, weights_source="w"))
    assert refused is not None and refused.endswith("; at most 0Gi of KV cache fits")


def test_nothing_is_checked_against_an_unknown_or_absent_gpu() -> None:
    assert vram.fit_error(memory(gpu_bytes=None, kv_bytes=10**15)) is None
    assert vram.fit_error(memory(gpus=0, kv_bytes=10**15)) is None


def test_the_static_fraction_leaves_the_reservation_for_the_cache() -> None:
    both = memory(kv_bytes=40 * GIB, weights_bytes=16 * GIB, gpus=2, gpu_bytes=80 * GIB)
    assert vram.static_fraction(both, engine="sglang") == (40 + 16) / 160
    with pytest.raises(ValueError) as missing:
        vram.static_fraction(memory(gpu_bytes=None), engine="sglang")
    assert str(missing.value) == (
        "the sglang engine sizes weights and KV cache together as a fraction of GPU memory, so "
        "kvpin must know both: set spec.gpu.product (a known GPU) or spec.gpu.memory and "
        "spec.weightsMemory (the model's weights per pod, e.g. 16Gi)"
    )


@pytest.mark.parametrize(
    ("size", "down", "text"),
    [(76 * GIB, False, "76Gi"), (int(14.96 * GIB), False, "15Gi"), (int(14.96 * GIB), True,
     "14.9Gi"), (int(61.04 * GIB), True, "61Gi"), (GIB // 2, False, "0.5Gi")],
)  # fmt: skip
def test_sizes_read_as_gib(size: int, down: bool, text: str) -> None:
    assert vram.gib(size, down=down) == text


def test_weights_memory_overrides_the_known_model() -> None:
    parsed = spec.parse(factories.endpoint(model="meta-llama/Llama-3.1-8B-Instruct",
                                           weightsMemory="9Gi"))  # fmt: skip
    assert (parsed.memory.weights_bytes, parsed.memory.weights_source) == (
        9 * GIB,
        "spec.weightsMemory",
    )
    known = spec.parse(factories.endpoint(model="meta-llama/Llama-3.1-8B-Instruct"))
    assert known.memory.weights_bytes == 16_060_000_000
