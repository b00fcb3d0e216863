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
        ("3Ti", 3 * 2**40),  # binary: 2^40, not 10^12
        ("2Pi", 2 * 2**50),
        ("1Ei", 2**60),
        ("4Mi", 4 * 2**20),
        ("7k", 7000),
        ("3M", 3 * 10**6),
        ("2T", 2 * 10**12),
        ("5P", 5 * 10**15),
        ("1E", 10**18),
        ("4000000u", 4),
        ("3000000000n", 3),
        ("12e-1", None),  # 1.2 bytes: refused below
        ("25e-1", None),
        ("2E2", 200),  # an exponent, not exa
        ("1.5e+3", 1500),
        ("1000e-3", 1),  # a negative exponent divides
        (".5Ki", 512),
        ("  8Gi ", 8 * 2**30),
        (0, 0),
        (4096, 4096),
    ],
)
def test_parses_kubernetes_quantities(text: str | int, expected: int | None) -> None:
    if expected is None:
        with pytest.raises(quantity.QuantityError, match="not a whole number of bytes"):
            quantity.parse_bytes(text)
    else:
        assert quantity.parse_bytes(text) == expected
        if isinstance(text, str):
            assert quantity.is_quantity(text)


@pytest.mark.parametrize(
    "text", ["", "40 Gi", "40GB", "-1Gi", "Gi", "4O0Mi", "1.2.3", "100m", "0.5", "1500m"]
)
def test_rejects_malformed_quantities(text: str) -> None:
    with pytest.raises(quantity.QuantityError):
        quantity.parse_bytes(text)


def test_errors_quote_what_was_given() -> None:
    with pytest.raises(quantity.QuantityError) as refused:
        quantity.parse_bytes("40GB")
    assert str(refused.value) == "not a quantity: '40GB' (examples: 40Gi, 500Mi, 8G)"
    with pytest.raises(quantity.QuantityError) as refused:
        quantity.parse_bytes(-5)
    assert str(refused.value) == "quantity must not be negative: -5"
    with pytest.raises(quantity.QuantityError) as refused:
        quantity.parse_bytes("1500m")
    assert str(refused.value) == (
        "'1500m' is 1.5 bytes, not a whole number of bytes (did you mean Mi or M?)"
    )
    assert not quantity.is_quantity("40GB") and not quantity.is_quantity("")


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (40 * 2**30, "40Gi"),
        (3 * 2**29, "1536Mi"),
        (1000, "1000"),
        (0, "0"),
        (1024, "1Ki"),
        (2**40, "1Ti"),
        (3 * 2**50, "3Pi"),
        (2**61, "2Ei"),
        (1023, "1023"),
        (2**20 + 1024, "1025Ki"),
    ],
)
def test_formats_sizes_in_the_largest_whole_unit(size: int, text: str) -> None:
    assert quantity.format_bytes(size) == text


def test_a_fraction_of_a_byte_is_refused_with_a_hint() -> None:
    with pytest.raises(quantity.QuantityError, match=r"0\.1 bytes.*did you mean Mi"):
        quantity.parse_bytes("100m")
