"""Logging set-up for every kvpin process, and the names of its loggers.

One logger per subsystem, named here. Request-level detail goes to DEBUG; prompt contents are
never logged by any of them.
"""

from __future__ import annotations

import json
import logging
import sys

OPERATOR = "kvpin.operator"
ROUTER = "kvpin.router"
PROXY = "kvpin.router.proxy"
MEMBERSHIP = "kvpin.router.membership"
SIM = "kvpin.sim"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message (and the exception, if any)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure(*, level: str = "INFO", json_format: bool = False) -> None:
    """Send all logs to stderr in plain or JSON form."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter()
        if json_format
        else logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's access log names every request path; keep it at DEBUG only.
    logging.getLogger("aiohttp.access").setLevel(
        logging.DEBUG if level.upper() == "DEBUG" else logging.WARNING
    )
