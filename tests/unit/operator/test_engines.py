import pytest

from kvpin.operator import engines, spec
from tests import factories

SIM_IMAGE = "registry.example/kvpin:test"


def runtime(**override: object) -> engines.EngineRuntime:
    return engines.build_runtime(spec.parse(factories.endpoint(**override)), sim_image=SIM_IMAGE)


def _flag(args: tuple[str, ...], name: str) -> str:
    return args[args.index(name) + 1]


def test_vllm_enforces_the_reservation_per_gpu_and_reports_cached_tokens() -> None:
    r = runtime(
        engine={"preset": "vllm"}, vramReservation="40Gi", gpu={"count": 2}, endpointId="ep-a"
    )
    assert r.image == engines.VLLM_IMAGE
    assert r.command == ("vllm", "serve")
    assert r.args[0] == "sim-8b"
    assert _flag(r.args, "--kv-cache-memory-bytes") == str(20 * 2**30)
    assert _flag(r.args, "--tensor-parallel-size") == "2"
    assert "--enable-prefix-caching" in r.args
    assert "--enable-prompt-tokens-details" in r.args
    # the endpoint id is served as an alias, so the router never rewrites `model`
    i = r.args.index("--served-model-name")
    assert r.args[i + 1 : i + 3] == ("ep-a", "sim-8b")


def test_sglang_turns_weights_and_reservation_into_a_memory_fraction() -> None:
    r = runtime(
        engine={"preset": "sglang"},
        vramReservation="48Gi",
        weightsMemory="16Gi",
        gpu={"count": 1, "memory": "80Gi"},
    )
    assert _flag(r.args, "--mem-fraction-static") == "0.800"  # (16 + 48) / 80
    assert "--enable-cache-report" in r.args
    assert _flag(r.args, "--served-model-name") == "ep-test"


def test_sglang_without_known_gpu_memory_is_a_spec_error() -> None:
    with pytest.raises(spec.SpecError, match="fraction of GPU memory"):
        runtime(engine={"preset": "sglang"}, gpu={"count": 1}, weightsMemory="16Gi")
    with pytest.raises(spec.SpecError) as refused:
        runtime(engine={"preset": "sglang"}, gpu={"count": 1, "memory": "80Gi"})
    assert str(refused.value) == (
        "the sglang engine sizes weights and KV cache together as a fraction of GPU memory, so "
        "kvpin must know both: set spec.weightsMemory (the model's weights per pod, e.g. 16Gi)"
    )


def test_sim_gets_the_reservation_as_cache_bytes() -> None:
    r = runtime(vramReservation="512Mi", engine={"preset": "sim", "port": 9000})
    assert r.image == SIM_IMAGE
    assert r.command == ("kvpin", "sim")
    assert _flag(r.args, "--kv-cache-bytes") == str(512 * 2**20)
    assert _flag(r.args, "--port") == "9000"


def test_extra_args_are_appended_and_custom_is_left_alone() -> None:
    assert runtime(engine={"preset": "sim", "args": ["--x", "1"]}).args[-2:] == ("--x", "1")
    r = runtime(engine={"preset": "custom", "image": "my/engine:1", "args": ["--foo"]})
    assert (r.image, r.command, r.args) == ("my/engine:1", (), ("--foo",))
    assert ("KVPIN_VRAM_RESERVATION_BYTES", str(2**30)) in r.env


def test_the_sim_preset_is_a_valid_kvpin_sim_command_line() -> None:
    from kvpin import cli

    r = runtime(vramReservation="512Mi", engine={"preset": "sim", "args": ["--time-scale", "0.5"]})
    args = cli.build_parser().parse_args([*r.command[1:], *r.args])
    assert (args.command, args.port, args.kv_cache_bytes) == ("sim", 8000, 512 * 2**20)
    assert args.served_model_name == ["ep-test"]
    assert args.time_scale == 0.5


ENV = (("KVPIN_ENDPOINT_ID", "support"), ("KVPIN_MODEL", "meta-llama/Llama-3.1-8B-Instruct"))


def parsed(**override: object) -> spec.EndpointSpec:
    body = factories.endpoint(model="meta-llama/Llama-3.1-8B-Instruct", endpointId="support",
                              **override)  # fmt: skip
    return spec.parse(body)


def test_every_preset_renders_its_whole_command_line() -> None:
    vllm = engines.build_runtime(
        parsed(engine={"preset": "vllm"}, vramReservation="30Gi",
               gpu={"count": 3, "product": "NVIDIA-A100-SXM4-80GB"}),
        sim_image="unused",
    )  # fmt: skip
    assert vllm == engines.EngineRuntime(
        "vllm/vllm-openai:v0.11.0", ("vllm", "serve"),
        ("meta-llama/Llama-3.1-8B-Instruct", "--host", "0.0.0.0", "--port", "8000",
         "--served-model-name", "support", "meta-llama/Llama-3.1-8B-Instruct",
         "--tensor-parallel-size", "3", "--enable-prefix-caching",
         "--enable-prompt-tokens-details", "--kv-cache-memory-bytes", str(10 * 2**30)),
        (*ENV, ("KVPIN_VRAM_RESERVATION_BYTES", str(30 * 2**30))),
    )  # fmt: skip
    sglang = engines.build_runtime(
        parsed(engine={"preset": "sglang", "port": 30000}, vramReservation="40Gi",
               gpu={"count": 2, "memory": "80Gi"}),
        sim_image="unused",
    )  # fmt: skip
    assert sglang == engines.EngineRuntime(
        "lmsysorg/sglang:v0.5.3", ("python3", "-m", "sglang.launch_server"),
        ("--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--host", "0.0.0.0",
         "--port", "30000", "--served-model-name", "support", "--tp", "2",
         "--enable-cache-report", "--mem-fraction-static", "0.343"),
        (*ENV, ("KVPIN_VRAM_RESERVATION_BYTES", str(40 * 2**30))),
    )  # fmt: skip
    sim = engines.build_runtime(
        parsed(engine={"preset": "sim", "args": ["--time-scale", "0.1"]},
               vramReservation="512Mi", gpu={"count": 0}),
        sim_image="kvpin:1",
    )  # fmt: skip
    assert sim == engines.EngineRuntime(
        "kvpin:1", ("kvpin", "sim"),
        ("--host", "0.0.0.0", "--port", "8000", "--model", "meta-llama/Llama-3.1-8B-Instruct",
         "--served-model-name", "support", "--kv-cache-bytes", str(512 * 2**20),
         "--time-scale", "0.1"),
        (*ENV, ("KVPIN_VRAM_RESERVATION_BYTES", str(512 * 2**20))),
        (("POD_NAME", "metadata.name"),),  # kvpin sim --pod-name's default: the pod's name
    )  # fmt: skip


def test_a_given_image_and_command_replace_the_presets() -> None:
    runtime = engines.build_runtime(
        parsed(engine={"preset": "vllm", "image": "my/vllm:dev", "command": ["python", "-m",
               "vllm.entrypoints.openai.api_server"]}, gpu={"count": 1}),
        sim_image="unused",
    )  # fmt: skip
    assert runtime.image == "my/vllm:dev"
    assert runtime.command == ("python", "-m", "vllm.entrypoints.openai.api_server")


def test_sglang_counts_every_gpu_and_never_passes_the_usable_share() -> None:
    # 16.06 GB of Llama-3.1-8B + 130Gi of cache over 2 x 80Gi: 0.9059; one GPU of 80Gi with
    # 61Gi of cache would be 0.9495; 62Gi does not fit and is refused before any pod starts
    two = parsed(engine={"preset": "sglang"}, vramReservation="130Gi",
                 gpu={"count": 2, "memory": "80Gi"})  # fmt: skip
    one = parsed(engine={"preset": "sglang"}, vramReservation="61Gi",
                 gpu={"count": 1, "memory": "80Gi"})  # fmt: skip
    fraction = [engines.build_runtime(s, sim_image="x").args for s in (two, one)]
    assert [a[a.index("--mem-fraction-static") + 1] for a in fraction] == ["0.906", "0.949"]
    with pytest.raises(spec.SpecError, match="at most 61Gi of KV cache fits"):
        parsed(engine={"preset": "sglang"}, vramReservation="62Gi",
               gpu={"count": 1, "memory": "80Gi"})  # fmt: skip
