"""Known models -> the GPU memory their weights take, for the VRAM arithmetic.

Pure. Weights are parameters x 2 bytes (the bf16 checkpoints these ids publish; parameter
counts from their model cards). Ids match case-insensitively, as the Hugging Face hub resolves
them. A quantized checkpoint, a local path or any model not listed returns None: its
`spec.weightsMemory` states the size.
"""

from __future__ import annotations

BYTES_PER_PARAMETER = 2  # bf16
_BILLIONS_OF_PARAMETERS = {
    "meta-llama/Llama-3.2-1B-Instruct": 1.24,
    "meta-llama/Llama-3.2-3B-Instruct": 3.21,
    "meta-llama/Llama-3.1-8B-Instruct": 8.03,
    "meta-llama/Llama-3.1-8B": 8.03,
    "meta-llama/Llama-3.1-70B-Instruct": 70.6,
    "meta-llama/Llama-3.3-70B-Instruct": 70.6,
    "mistralai/Mistral-7B-Instruct-v0.3": 7.25,
    "Qwen/Qwen2.5-0.5B-Instruct": 0.494,
    "Qwen/Qwen2.5-1.5B-Instruct": 1.54,
    "Qwen/Qwen2.5-7B-Instruct": 7.62,
    "Qwen/Qwen2.5-14B-Instruct": 14.8,
    "Qwen/Qwen2.5-32B-Instruct": 32.8,
    "Qwen/Qwen2.5-72B-Instruct": 72.7,
    "Qwen/Qwen3-8B": 8.19,
    "Qwen/Qwen3-32B": 32.8,
    "google/gemma-2-9b-it": 9.24,
    "google/gemma-2-27b-it": 27.2,
}
_BY_ID = {name.lower(): billions for name, billions in _BILLIONS_OF_PARAMETERS.items()}


def weights_of(model: str) -> int | None:
    """Bytes of the model's weights, or None when kvpin does not know the model."""
    billions = _BY_ID.get(model.strip().lower())
    if billions is None:
        return None
    return round(billions * 10**9) * BYTES_PER_PARAMETER
