"""`kvpin demo` end to end: real simulators, a real router, a tiny workload."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import uuid

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


def test_ctrl_c_stops_the_demo_and_its_processes() -> None:
    mark = uuid.uuid4().hex
    proc = subprocess.Popen(
        [str(KVPIN), "demo", *TINY, "--conversations", "400", "--policies", "kvpin"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "KVPIN_TEST_MARK": mark},
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while len(marked_processes(mark)) < 4 and time.monotonic() < deadline:  # demo, 2 sims, router
        time.sleep(0.2)
    assert len(marked_processes(mark)) == 4, "the demo did not start its processes"
    # Interrupted as soon as everything runs: whatever it is doing then, nothing is left.
    proc.send_signal(signal.SIGINT)
    # communicate, not wait: a demo blocked writing to a full pipe would never exit
    try:
        proc.communicate(timeout=60)  # each server gets seconds to stop, more when loaded
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"the demo did not stop: {out[-2000:]!r} {err[-4000:]!r}") from None
    assert proc.returncode != 0
    deadline = time.monotonic() + 15
    while marked_processes(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = {
        pid: pathlib.Path(f"/proc/{pid}/cmdline").read_bytes() for pid in marked_processes(mark)
    }
    assert left == {}
