"""Load generation with wrk: a POST script in, requests per second and latency out.

`parse_output` is pure; `run` starts wrk (pinned to the CPUs it is given) and waits for it.
wrk is used because a load generator written in Python would saturate before the servers
under test do; it is a Debian package (`apt-get install wrk`).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from kvpin.bench import processes

_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}
_PERCENTILE = re.compile(r"^\s*(50|75|90|99)(?:\.0+)?%\s+([\d.]+)(us|ms|s|m)\s*$", re.MULTILINE)
_RPS = re.compile(r"^Requests/sec:\s+([\d.]+)", re.MULTILINE)
_ERRORS = re.compile(r"Non-2xx or 3xx responses:\s+(\d+)")
_SOCKET_ERRORS = re.compile(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)")
_TOTAL = re.compile(r"^\s*(\d+) requests in", re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class Result:
    """What one wrk run measured."""

    requests: int
    requests_per_s: float
    latency_s: Mapping[int, float]  # percentile -> seconds
    errors: int


def parse_output(text: str) -> Result:
    """Read wrk's `--latency` report."""
    rps = _RPS.search(text)
    total = _TOTAL.search(text)
    if not rps or not total:
        raise ValueError(f"not a wrk report:\n{text}")
    latency = {int(p): float(v) * _UNITS[u] for p, v, u in _PERCENTILE.findall(text)}
    errors = sum(int(n) for n in _ERRORS.findall(text))
    socket = _SOCKET_ERRORS.search(text)
    if socket:
        errors += sum(int(n) for n in socket.groups())
    return Result(int(total.group(1)), float(rps.group(1)), latency, errors)


def post_script(body: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> str:
    """A wrk Lua script that POSTs one JSON body."""
    lines = ['wrk.method = "POST"', f"wrk.body = {json.dumps(json.dumps(body))}",
             'wrk.headers["Content-Type"] = "application/json"']  # fmt: skip
    lines += [f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in (headers or {}).items()]
    return "\n".join(lines) + "\n"


def available() -> bool:
    """Whether wrk is installed."""
    return shutil.which("wrk") is not None


def run(
    url: str,
    body: Mapping[str, Any],
    *,
    duration_s: float,
    connections: int,
    cpus: Sequence[int] = (),
    headers: Mapping[str, str] | None = None,
) -> Result:
    """POST `body` to `url` as fast as `connections` keep-alive connections allow."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(post_script(body, headers))
    try:
        command = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(duration_s))}s", "--latency",
                   "-s", script.name, url]  # fmt: skip
        out = subprocess.run(
            processes.pinned(command, cpus), capture_output=True, text=True, check=True
        )
    finally:
        pathlib.Path(script.name).unlink()
    return parse_output(out.stdout)
