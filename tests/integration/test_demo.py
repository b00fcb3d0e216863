"""`kvpin demo` end to end: real simulators, a real router, a tiny workload."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid

import pytest

KVPIN = pathlib.Path(sys.executable).parent / "kvpin"
TINY = ["--conversations", "10", "--turns", "3", "--pods", "2", "--agents", "2",
        "--system-words", "120", "--cache-blocks", "600", "--time-scale", "0.02",
        "--arrival-rate", "20", "--think", "0.05"]  # fmt: skip


def marked_processes(mark: str) -> list[int]:
    """PIDs of live processes whose environment carries `mark`."""
    found = []
    for environ in pathlib.Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"KVPIN_TEST_MARK={mark}".encode() in environ.read_bytes():
                found.append(int(environ.parent.name))
        except OSError:
            continue
    return [pid for pid in found if pid != os.getpid()]


def replaying(mark: str) -> bool:
    """The demo's policy table is under way: its router (the one with the runner's config, not
    the first checks' demo-router.yaml) has answered requests."""
    for pid in marked_processes(mark):
        try:
            args = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"router" in args and not any(a.endswith(b"demo-router.yaml") for a in args):
            port = int(args[args.index(b"--port") + 1])
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    text = r.read().decode()
            except OSError:
                return False
            served = re.findall(r"^kvpin_router_requests_total\{.*\} ([0-9.]+)", text, re.M)
            return sum(map(float, served)) >= 100  # well under way
    return False


def hit_rates(table: str) -> dict[str, float]:
    rows = re.findall(r"^\| (\S+) \| ([\d.]+)% \|", table, re.MULTILINE)
    return {policy: float(rate) for policy, rate in rows}


def test_the_demo_beats_random_and_cleans_up(tmp_path: pathlib.Path) -> None:
    mark = uuid.uuid4().hex
    chart = tmp_path / "demo.png"
    out = subprocess.run(
        [str(KVPIN), "demo", *TINY, "--policies", "kvpin,random", "--chart", str(chart)],
        capture_output=True, text=True, timeout=120, check=True,
        env={**os.environ, "KVPIN_TEST_MARK": mark},
    )  # fmt: skip
    rates = hit_rates(out.stdout)
    assert set(rates) == {"kvpin", "random"}
    assert rates["kvpin"] > rates["random"]
    # the two-call check: nothing cached, then nearly the whole prompt
    first, second = re.findall(r"prompt_tokens ([\d,]+), cached_tokens ([\d,]+)", out.stdout)
    assert first[1] == "0"
    assert int(second[1].replace(",", "")) > 0.9 * int(second[0].replace(",", ""))
    assert "kvpin found" in out.stdout  # the verdict, win or lose
    assert "kvpin_router_prefix_breaks_total names it: system 3" in out.stdout
    assert chart.read_bytes().startswith(b"\x89PNG")
    assert marked_processes(mark) == []  # every simulator and router it started is gone


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_or_sigterm_stops_the_demo_and_its_processes(sig: int, code: int) -> None:
    """Interrupted (Ctrl-C) or terminated (`timeout`, `kill`) during startup (its servers just
    up) and during the replay (its router has answered requests): it stops at once, with the
    signal's exit code, and leaves no process behind.

    The demo is started with SIGINT at its default: a test run started in the background by a
    non-interactive shell inherits SIGINT ignored (as shells do for background jobs), and so
    would the demo, which would then rightly not stop."""
    for moment in ("startup", "replay"):
        mark = uuid.uuid4().hex
        proc = subprocess.Popen(
            [str(KVPIN), "demo", *TINY, "--conversations", "400", "--policies", "kvpin"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env={**os.environ, "KVPIN_TEST_MARK": mark},
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
        )  # fmt: skip
        seen = bytearray()

        def read(stream=proc.stderr, seen=seen) -> None:  # type: ignore[no-untyped-def]
            while chunk := stream.read1(4096):
                seen.extend(chunk)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
            len(marked_processes(mark)) >= 4  # the demo, 2 sims, the router
            if moment == "startup"
            else replaying(mark)
        ):
            time.sleep(0.1)
        assert time.monotonic() < deadline, f"the demo never reached its {moment}"
        proc.send_signal(sig)
        try:
            proc.wait(60)  # each server gets seconds to stop, more on a loaded machine
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError(f"the demo did not stop: {bytes(seen)[-3000:]!r}") from None
        reader.join(10)
        assert proc.returncode == code, (moment, bytes(seen)[-3000:])
        deadline = time.monotonic() + 15
        while marked_processes(mark) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = {
            pid: pathlib.Path(f"/proc/{pid}/cmdline").read_bytes() for pid in marked_processes(mark)
        }
        assert left == {}, moment
