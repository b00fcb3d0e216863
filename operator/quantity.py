"""Kubernetes resource quantities ("40Gi", "500M", "1.5e3") to whole bytes.

Pure. The CRD's schema already rejects most malformed strings with the same grammar; this is
the operator's own check and the conversion used for the VRAM annotation and engine flags.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
}  # fmt: skip
# The same grammar as the CRD's `pattern`, which mirrors resource.Quantity's.
PATTERN = r"^(\+)?([0-9]+(\.[0-9]*)?|\.[0-9]+)(([KMGTPE]i)|[numkMGTPE]|([eE][-+]?[0-9]+))?$"
_QUANTITY = re.compile(PATTERN)


class QuantityError(ValueError):
    """The string is not a Kubernetes quantity."""


def is_quantity(text: str) -> bool:
    """Whether `text` is a Kubernetes quantity (2, 500m, 16Gi, 1e3)."""
    return bool(_QUANTITY.match(text.strip()))


def parse_bytes(quantity: str | int) -> int:
    """Return the quantity as bytes; a fraction of a byte is refused, not rounded."""
    if isinstance(quantity, int):
        if quantity < 0:
            raise QuantityError(f"quantity must not be negative: {quantity}")
        return quantity
    text = str(quantity).strip()
    match = _QUANTITY.match(text)
    if not match:
        raise QuantityError(f"not a quantity: {quantity!r} (examples: 40Gi, 500Mi, 8G)")
    number, suffix = match.group(2), match.group(4) or ""
    try:
        value = Decimal(number)
        if suffix in _BINARY:
            value *= _BINARY[suffix]
        elif suffix in _DECIMAL:
            value *= _DECIMAL[suffix]
        else:  # an exponent such as e9
            value *= Decimal(10) ** int(suffix[1:])
    except InvalidOperation as err:
        raise QuantityError(f"not a quantity: {quantity!r}") from err
    if value != value.to_integral_value():
        # Kubernetes would round 100m (0.1 byte) up to one byte; for a memory size that is
        # always a slip of the unit.
        raise QuantityError(
            f"{quantity!r} is {value.normalize():f} bytes, not a whole number of bytes "
            "(did you mean Mi or M?)"
        )
    return int(value)


def format_bytes(size: int) -> str:
    """A short human form: the largest binary unit that divides it, else plain bytes."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _BINARY[suffix]
        if size >= unit and size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)
