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


def test_sglang_turns_the_reservation_into_a_memory_fraction() -> None:
    r = runtime(
        engine={"preset": "sglang"},
        vramReservation="60Gi",
        gpu={"count": 1, "product": "NVIDIA-H100-80GB-HBM3"},
    )
    assert _flag(r.args, "--mem-fraction-static") == "0.750"
    assert "--enable-cache-report" in r.args
    assert _flag(r.args, "--served-model-name") == "ep-test"


def test_sglang_without_known_gpu_memory_is_a_spec_error() -> None:
    with pytest.raises(spec.SpecError, match="fraction of GPU memory"):
        runtime(engine={"preset": "sglang"}, gpu={"count": 1})


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
