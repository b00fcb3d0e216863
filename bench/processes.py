"""Servers for benchmarks: `kvpin` subcommands as processes, pinned to CPUs, waited for.

I/O. Pinning the server to one core and the load generator to another is what makes
"requests per second on one core" a meaningful figure on a 2-core machine.
"""

from __future__ import annotations

import contextlib
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kvpin_command(build: str | None = None) -> list[str]:
    """How to start `kvpin` from the running interpreter's environment, or from the virtualenv
    (`.venv`) of another checkout, `build`, to compare two versions in one run."""
    if build is not None:
        script = pathlib.Path(build, ".venv", "bin", "kvpin")
        if not script.exists():
            raise FileNotFoundError(f"{script} does not exist: build= names a checkout's root")
        return [str(script)]
    script = pathlib.Path(sys.executable).parent / "kvpin"
    return [str(script)] if script.exists() else [sys.executable, "-P", "-m", "kvpin.cli"]


def pinned(args: Sequence[str], cpus: Sequence[int]) -> list[str]:
    """`args` run by taskset on `cpus` (all CPUs when empty)."""
    if not cpus:
        return list(args)
    return ["taskset", "-c", ",".join(map(str, cpus)), *args]


def wait_http(
    url: str, *, timeout: float = 30.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """Wait until GET `url` answers 200."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited with {proc.returncode}")
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=1) as r:
            if r.status == 200:
                return
        time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer within {timeout}s")


@contextlib.contextmanager
def running(
    args: Sequence[str], *, health_url: str, cpus: Sequence[int] = ()
) -> Iterator[subprocess.Popen[bytes]]:
    """A server process, pinned to `cpus`, healthy on entry and stopped on exit."""
    with tempfile.TemporaryFile() as output:
        proc = subprocess.Popen(pinned(args, cpus), stdout=output, stderr=subprocess.STDOUT)
        try:  # whatever happens from here on, Ctrl-C during start-up included, it is stopped
            try:
                wait_http(health_url, proc=proc)
            except (RuntimeError, TimeoutError) as err:
                _stop(proc)
                output.seek(0)
                tail = output.read()[-2000:].decode(errors="replace")
                raise RuntimeError(f"{err}; its output ended with:\n{tail}") from err
            yield proc
        finally:
            _stop(proc)


STOP_GRACE_S = 3.0


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT (a graceful stop for aiohttp and Rust servers alike), then SIGKILL.

    The grace is short: a benchmark's traffic is over (or abandoned) when its servers stop, and
    kvpin's servers drain in-flight requests for up to an hour on a signal (what a pod needs),
    which a request the interrupted client never reads would hold open.
    """
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
