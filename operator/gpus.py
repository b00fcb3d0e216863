"""GPU products and MIG slices -> memory per GPU, for checking a VRAM reservation.

Pure. Products are the `nvidia.com/gpu.product` node labels NVIDIA's GPU feature discovery
writes. Known products give the total `nvidia-smi` reports (MiB), which is not the number in
the name: an "H100-80GB" has 81,559 MiB, an "L4" 23,034 MiB (less than 24 GiB), and the
"480GB" of a GH200 is its CPU's memory. For an unknown product whose name states a size, the
size is read as the vendor means it, decimal GB (10^9 bytes), which is at most what such a GPU
reports. A MIG slice (`nvidia.com/mig-1g.10gb` as the resource, or `...-MIG-1g.10gb` in the
product under the single strategy) has its profile's memory, read the same way, never its
parent's. Unknown: None, and `spec.gpu.memory` states the size.
"""

from __future__ import annotations

import re

MIB = 2**20
GB = 10**9
# nvidia-smi's total memory per GPU, MiB.
_KNOWN_MIB = {
    "Tesla-T4": 15_360,
    "Tesla-V100-SXM2-16GB": 16_160,
    "Tesla-V100-SXM2-32GB": 32_510,
    "NVIDIA-A10": 23_028,
    "NVIDIA-A10G": 23_028,
    "NVIDIA-L4": 23_034,
    "NVIDIA-L40": 46_068,
    "NVIDIA-L40S": 46_068,
    "NVIDIA-RTX-A6000": 49_140,
    "NVIDIA-A100-SXM4-40GB": 40_960,
    "NVIDIA-A100-PCIE-40GB": 40_960,
    "NVIDIA-A100-SXM4-80GB": 81_920,
    "NVIDIA-A100-80GB-PCIe": 81_920,
    "NVIDIA-H100-80GB-HBM3": 81_559,
    "NVIDIA-H100-PCIe": 81_559,
    "NVIDIA-H100-NVL": 95_830,
    "NVIDIA-H200": 143_771,
    "NVIDIA-GH200-480GB": 97_871,  # 96 GB of HBM3; the 480 GB are the Grace CPU's LPDDR5X
    "NVIDIA-B200": 183_359,
}
_MIG_PROFILE = re.compile(r"mig-(\d+)g\.(\d+)gb", re.IGNORECASE)
_SIZE_IN_NAME = re.compile(r"(\d+)GB", re.IGNORECASE)


def memory_of(product: str | None, resource_name: str = "") -> int | None:
    """Bytes of memory of one GPU (or MIG slice) of this product, or None when unknown."""
    for text in (resource_name, product or ""):
        mig = _MIG_PROFILE.search(text)
        if mig:
            return int(mig.group(2)) * GB
    if not product:
        return None
    if product in _KNOWN_MIB:
        return _KNOWN_MIB[product] * MIB
    match = _SIZE_IN_NAME.search(product)
    return int(match.group(1)) * GB if match else None
