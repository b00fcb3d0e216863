"""SimConfig: one simulator's model, cache size, timing and faults, built once by the CLI.

Pure. The cache capacity comes from `--kv-cache-bytes` and a model profile (bytes per token =
2 (K and V) x layers x KV heads x head size x bytes per element), or directly in blocks; this is
how the operator's VRAM reservation becomes the simulator's cache size.
"""

from __future__ import annotations

import dataclasses
import zlib

from kvpin.sim.engine import Timing


@dataclasses.dataclass(frozen=True)
class ModelProfile:
    """The KV geometry of a model."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int = 2  # bf16/fp16; 1 for an fp8 KV cache

    @property
    def bytes_per_token(self) -> int:
        """KV-cache bytes one token occupies."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes


PROFILES = {
    "llama-3.1-8b": ModelProfile(layers=32, kv_heads=8, head_dim=128),
    "llama-3.1-70b": ModelProfile(layers=80, kv_heads=8, head_dim=128),
    "qwen2.5-7b": ModelProfile(layers=28, kv_heads=4, head_dim=128),
    "mistral-7b": ModelProfile(layers=32, kv_heads=8, head_dim=128),
}
DEFAULT_PROFILE = "llama-3.1-8b"


def capacity_blocks(kv_cache_bytes: int, profile: ModelProfile, block_size: int) -> int:
    """Whole blocks that fit in `kv_cache_bytes`."""
    return kv_cache_bytes // (profile.bytes_per_token * block_size)


@dataclasses.dataclass(frozen=True)
class Faults:
    """Misbehaviour for tests of whatever sits in front of the simulator."""

    startup_delay_s: float = 0.0
    """/health answers 503 for this long after start."""
    error_rate: float = 0.0
    """Fraction of completion requests answered with a 500 before any byte."""
    drop_rate: float = 0.0
    """Fraction of requests whose connection is dropped (mid-stream when streaming)."""
    stall_rate: float = 0.0
    """Fraction of streams that stall after their first token."""
    stall_s: float = 3600.0
    """How long a stalled stream stalls."""
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class SimConfig:
    """Everything one `kvpin sim` process serves."""

    model: str = "sim-8b"
    served_model_names: tuple[str, ...] = ()
    """Names accepted in `model`; the model itself when empty."""
    adapter: str = ""
    pod_name: str | None = None
    """Reported in every response (`system_fingerprint`): which pod answered."""
    block_size: int = 16
    capacity_blocks: int = 16_384
    max_model_len: int = 131_072
    max_body_bytes: int = 32 * 2**20
    debug_routes: bool = False
    """Serve POST /debug/cached_tokens: the exact cache view a benchmark's oracle needs."""
    tokenizer: str | None = None
    """Path of a Hugging Face tokenizer.json; the built-in word tokenizer when None."""
    timing: Timing = dataclasses.field(default_factory=Timing)
    faults: Faults = dataclasses.field(default_factory=Faults)

    @property
    def names(self) -> tuple[str, ...]:
        """Every name the simulator answers to, the first one reported in responses."""
        return self.served_model_names or (self.model,)

    def salt(self, cache_salt: str = "") -> int:
        """Block-hash salt: a different model, adapter or request `cache_salt` never shares
        blocks (vLLM folds `cache_salt` into the first block's hash, so the chain differs)."""
        return zlib.crc32(
            f"{self.model}\0{self.adapter}\0{cache_salt}".encode("utf-8", "surrogatepass")
        )
