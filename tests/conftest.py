"""Root test configuration: prints the figures the tests measured."""

from __future__ import annotations

import pytest

from tests import figures


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if figures.FIGURES:
        terminalreporter.section("kvpin figures")
        for name, value in figures.FIGURES.items():
            terminalreporter.write_line(f"{name}: {value}")
