"""GPU products -> memory per GPU, for checking a VRAM reservation against its hardware.

Pure. Product strings are the `nvidia.com/gpu.product` node labels that NVIDIA's GPU feature
discovery writes. A product that names its size ("...-80GB") is read from the name; a few
common ones that do not are listed. Unknown products return None and the check is skipped
(`spec.gpu.memory` states the size explicitly).
"""

from __future__ import annotations

import re

GIB = 2**30
_KNOWN = {
    "NVIDIA-L4": 24 * GIB,
    "NVIDIA-A10G": 24 * GIB,
    "NVIDIA-A10": 24 * GIB,
    "NVIDIA-L40S": 48 * GIB,
    "NVIDIA-L40": 48 * GIB,
    "Tesla-T4": 16 * GIB,
    "Tesla-V100-SXM2-16GB": 16 * GIB,
    "NVIDIA-H100-80GB-HBM3": 80 * GIB,
    "NVIDIA-H200": 141 * GIB,
    "NVIDIA-B200": 180 * GIB,
}
_SIZE_IN_NAME = re.compile(r"(\d+)GB", re.IGNORECASE)


def memory_of(product: str) -> int | None:
    """Bytes of memory of one GPU of this product, or None when unknown."""
    if product in _KNOWN:
        return _KNOWN[product]
    match = _SIZE_IN_NAME.search(product)
    return int(match.group(1)) * GIB if match else None
