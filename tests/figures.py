"""Figures measured by tests (timings worth reporting, never asserted tightly), printed in
pytest's closing summary so CI logs and the README can quote them."""

from __future__ import annotations

FIGURES: dict[str, str] = {}


def record(name: str, value: str) -> None:
    """Keep a figure for the summary."""
    FIGURES[name] = value
