"""A one-line progress bar on stderr, redrawn in place."""

from __future__ import annotations

import sys
from typing import TextIO


class ProgressBar:
    """Shows `label [#####.....] done/total`."""

    def __init__(self, stream: TextIO = sys.stderr, width: int = 30) -> None:
        self.stream = stream
        self.width = width
        self.label = ""
        self.filled = -1

    def __call__(self, label: str, done: int, total: int) -> None:
        filled = self.width * done // max(total, 1)
        tty = self.stream.isatty()
        if done < total and (not tty or (label, filled) == (self.label, self.filled)):
            return  # redraw only when the bar moves, and only the last state when not a terminal
        self.filled = filled
        if label != self.label and self.label:
            self.stream.write("\n")
        self.label = label
        bar = "#" * filled + "." * (self.width - filled)
        self.stream.write(f"\r{label:<28} [{bar}] {done}/{total}")
        if done >= total:
            self.stream.write("\n")
            self.label = ""
        self.stream.flush()
