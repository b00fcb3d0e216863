import pytest

from kvpin.operator import quantity


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("40Gi", 40 * 2**30),
        ("512Mi", 512 * 2**20),
        ("1Ki", 1024),
        ("8G", 8 * 10**9),
        ("1.5Gi", 3 * 2**29),
        ("100", 100),
        ("1e3", 1000),
        ("+2k", 2000),
        ("2000m", 2),  # a whole number of bytes in any unit is fine
    ],
)
def test_parses_kubernetes_quantities(text: str, expected: int) -> None:
    assert quantity.parse_bytes(text) == expected


@pytest.mark.parametrize(
    "text", ["", "40 Gi", "40GB", "-1Gi", "Gi", "4O0Mi", "1.2.3", "100m", "0.5", "1500m"]
)
def test_rejects_malformed_quantities(text: str) -> None:
    with pytest.raises(quantity.QuantityError):
        quantity.parse_bytes(text)


@pytest.mark.parametrize(
    ("size", "text"), [(40 * 2**30, "40Gi"), (3 * 2**29, "1536Mi"), (1000, "1000"), (0, "0")]
)
def test_formats_sizes_in_the_largest_whole_unit(size: int, text: str) -> None:
    assert quantity.format_bytes(size) == text


def test_a_fraction_of_a_byte_is_refused_with_a_hint() -> None:
    with pytest.raises(quantity.QuantityError, match=r"0\.1 bytes.*did you mean Mi"):
        quantity.parse_bytes("100m")
