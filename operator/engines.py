"""Engine presets -> the container that runs them, with the VRAM reservation enforced.

Pure. Each preset turns the endpoint's reservation into the engine's own cache budget and
switches prefix caching and its usage reporting on:

- vllm: `--kv-cache-memory-bytes` (per GPU, so the pod's reservation is split over the
  tensor-parallel GPUs), `--enable-prefix-caching`, `--enable-prompt-tokens-details` so
  `usage.prompt_tokens_details.cached_tokens` is reported.
- sglang: it has no byte budget, only `--mem-fraction-static` (weights and KV pool together),
  so it gets (weights + reservation) / GPU memory (`kvpin.operator.vram`), which needs both
  sizes known; `--enable-cache-report` adds cached tokens to usage.
- sim: `kvpin sim --kv-cache-bytes`, the simulator sizes its block pool from it.
- custom: the user's command and args untouched; the reservation arrives as env vars.

Every engine serves the model under the endpoint id too (`--served-model-name`), so the
router forwards a request whose `model` is the endpoint id without rewriting its body.
"""

from __future__ import annotations

import dataclasses

from kvpin.operator import vram
from kvpin.operator.spec import EndpointSpec, SpecError

VLLM_IMAGE = "vllm/vllm-openai:v0.11.0"
SGLANG_IMAGE = "lmsysorg/sglang:v0.5.3"


@dataclasses.dataclass(frozen=True)
class EngineRuntime:
    """The container command line of one engine pod."""

    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    field_env: tuple[tuple[str, str], ...] = ()
    """Env vars set from the pod's own fields (the downward API): name, field path."""


def build_runtime(spec: EndpointSpec, *, sim_image: str) -> EngineRuntime:
    """The image, command, args and env for the endpoint's engine preset."""
    engine = spec.engine
    port = str(engine.port)
    env = (
        ("KVPIN_ENDPOINT_ID", spec.endpoint_id),
        ("KVPIN_MODEL", spec.model),
        ("KVPIN_VRAM_RESERVATION_BYTES", str(spec.vram_reservation_bytes)),
    )
    if engine.preset == "vllm":
        per_gpu = spec.vram_reservation_bytes // max(spec.gpu.count, 1)
        return EngineRuntime(
            image=engine.image or VLLM_IMAGE,
            command=engine.command or ("vllm", "serve"),
            args=(
                spec.model,
                "--host", "0.0.0.0",
                "--port", port,
                "--served-model-name", spec.endpoint_id, spec.model,
                "--tensor-parallel-size", str(spec.gpu.count),
                "--enable-prefix-caching",
                "--enable-prompt-tokens-details",
                "--kv-cache-memory-bytes", str(per_gpu),
                *engine.args,
            ),
            env=env,
        )  # fmt: skip
    if engine.preset == "sglang":
        return EngineRuntime(
            image=engine.image or SGLANG_IMAGE,
            command=engine.command or ("python3", "-m", "sglang.launch_server"),
            args=(
                "--model-path", spec.model,
                "--host", "0.0.0.0",
                "--port", port,
                "--served-model-name", spec.endpoint_id,
                "--tp", str(spec.gpu.count),
                "--enable-cache-report",
                "--mem-fraction-static", _sglang_fraction(spec),
                *engine.args,
            ),
            env=env,
        )  # fmt: skip
    if engine.preset == "sim":
        return EngineRuntime(
            image=engine.image or sim_image,
            command=engine.command or ("kvpin", "sim"),
            args=(
                "--host", "0.0.0.0",
                "--port", port,
                "--model", spec.model,
                "--served-model-name", spec.endpoint_id,
                "--kv-cache-bytes", str(spec.vram_reservation_bytes),
                *engine.args,
            ),
            env=env,
            field_env=(("POD_NAME", "metadata.name"),),  # it names the pod in every answer
        )  # fmt: skip
    # custom: validated by spec.parse to have an image and a command
    return EngineRuntime(
        image=engine.image or "", command=engine.command, args=engine.args, env=env
    )


def _sglang_fraction(spec: EndpointSpec) -> str:
    try:
        return f"{vram.static_fraction(spec.memory, engine='sglang'):.3f}"
    except ValueError as err:
        raise SpecError(str(err)) from None
