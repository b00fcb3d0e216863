"""A pod's GPU memory arithmetic: the model's weights plus the KV-cache reservation must fit.

Pure. `spec.vramReservation` means one thing for every preset: the KV-cache budget of one
pod. Engines that take a byte budget get it as is (vLLM, the sim); an engine that sizes memory
as a fraction of the GPU for weights and cache together (SGLang's `--mem-fraction-static`) gets
the fraction that leaves exactly the reservation for the cache once the weights are loaded.
Whatever is known is checked: weights + reservation may use at most `USABLE_FRACTION` of the
pod's GPU memory, the rest being activations, CUDA graphs and communication buffers; a spec
that does not fit is refused with the arithmetic in the message.
"""

from __future__ import annotations

import dataclasses
import math

GIB = 2**30
USABLE_FRACTION = 0.95


@dataclasses.dataclass(frozen=True)
class PodMemory:
    """What is known of one pod's GPU memory and what it must hold."""

    reservation: str  # as written, for messages
    kv_bytes: int
    gpus: int
    gpu_bytes: int | None  # per GPU (or MIG slice); None: unknown
    gpu_name: str = ""  # the product, for messages
    weights_bytes: int | None = None  # the whole model, over all the pod's GPUs; None: unknown
    weights_source: str = ""  # spec.weightsMemory or the model id, for messages

    @property
    def total(self) -> int | None:
        """The pod's GPU memory, when known."""
        return None if self.gpu_bytes is None else self.gpu_bytes * self.gpus


def fit_error(memory: PodMemory) -> str | None:
    """Why the reservation (with the weights, when known) cannot fit the pod's GPUs, or None."""
    total = memory.total
    if not total:
        return None  # no GPU, or its memory unknown: nothing to check against
    usable = int(total * USABLE_FRACTION)
    weights = memory.weights_bytes or 0
    needed = memory.kv_bytes + weights
    if needed <= usable:
        return None
    parts = f"{gib(memory.kv_bytes)} of KV cache"
    if weights:
        parts += f" + {gib(weights)} of weights ({memory.weights_source}) = {gib(needed)}"
    verdict = (
        "the weights alone do not fit" if weights >= usable
        else f"at most {gib(usable - weights, down=True)} of KV cache fits"
    )  # fmt: skip
    gpus = f"{memory.gpus} x {gib(memory.gpu_bytes or 0)}"
    if memory.gpu_name:
        gpus += f" {memory.gpu_name}"
    return (
        f"spec.vramReservation {memory.reservation} does not fit: {parts}, more than the "
        f"{gib(usable, down=True)} usable of the pod's GPU memory ({USABLE_FRACTION:.0%} of "
        f"{gpus}); {verdict}"
    )


def static_fraction(memory: PodMemory, *, engine: str) -> float:
    """The share of GPU memory for weights and cache together that leaves the reservation
    for the cache; ValueError says what is missing to compute it."""
    total, weights = memory.total, memory.weights_bytes
    if total and weights:
        return (weights + memory.kv_bytes) / total
    missing = [
        what
        for what, known in (
            ("spec.gpu.product (a known GPU) or spec.gpu.memory", total),
            ("spec.weightsMemory (the model's weights per pod, e.g. 16Gi)", weights),
        )
        if not known
    ]
    raise ValueError(
        f"the {engine} engine sizes weights and KV cache together as a fraction of GPU "
        f"memory, so kvpin must know both: set {' and '.join(missing)}"
    )


def gib(size: int, *, down: bool = False) -> str:
    """Bytes as GiB with one decimal at most (76Gi, 14.9Gi); `down` rounds down, for a limit
    a user may copy into the spec."""
    tenths = size * 10 / GIB
    text = f"{(math.floor(tenths) if down else round(tenths)) / 10:.1f}"
    return (text[:-2] if text.endswith(".0") else text) + "Gi"
