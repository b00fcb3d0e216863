"""`kvpin router` as users start it: the command line, a static file, a tokens file."""

from __future__ import annotations

import asyncio
import pathlib
import subprocess
import sys

import aiohttp
import pytest
import yaml

from tests.integration.conftest import StartSim, eventually
from tests.integration.test_router_faults import free_port

KVPIN = pathlib.Path(sys.executable).parent / "kvpin"


def router_command(config: pathlib.Path, port: int, *extra: str) -> list[str]:
    return [str(KVPIN), "router", "--config", str(config), "--host", "127.0.0.1",
            "--port", str(port), "--engine-metrics-interval", "0", *extra]  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--replicas", "http://127.0.0.1:1,http://127.0.0.1:2"], "need --replica"),
        (["--replica", "http://127.0.0.1:1"], "--replica needs --replicas"),
        (
            ["--replica", "http://127.0.0.1:3", "--replicas", "http://127.0.0.1:1"],
            "must list this replica's own URL",
        ),
        (
            ["--replica", "http://127.0.0.1:1", "--replicas", "http://127.0.0.1:1,10.0.0.2:80"],
            "replica '10.0.0.2:80': expected http(s)://host:port",
        ),
    ],
)
def test_replica_flags_that_cannot_work_stop_the_router_with_a_clear_error(
    tmp_path: pathlib.Path, flags: list[str], message: str
) -> None:
    config = tmp_path / "router.yaml"
    config.write_text("endpoints: {}")
    done = subprocess.run(router_command(config, free_port(), *flags), capture_output=True,
                          text=True, timeout=30, check=False)  # fmt: skip
    assert done.returncode != 0
    assert message in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "No such file"),
        ("a b c\n", "line 1: expected `TOKEN [TENANT]`"),
        ("# only a comment\n\n", "no token in the file"),
        (b"\xff\xfe token\n", "codec can't decode"),
    ],
)
def test_an_unusable_tokens_file_stops_the_router_with_a_clear_error(
    tmp_path: pathlib.Path, content: str | bytes | None, message: str
) -> None:
    config = tmp_path / "router.yaml"
    config.write_text("endpoints: {}")
    tokens = tmp_path / "tokens"
    if isinstance(content, bytes):
        tokens.write_bytes(content)
    elif content is not None:
        tokens.write_text(content)
    done = subprocess.run(
        router_command(config, free_port(), "--auth-tokens-file", str(tokens)),
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert message in done.stderr
    assert f"--auth-tokens-file {tokens}" in done.stderr
    assert "Traceback" not in done.stderr


async def test_the_tokens_file_guards_every_route_but_health(
    start_sim: StartSim, tmp_path: pathlib.Path
) -> None:
    config = tmp_path / "router.yaml"
    members = [await start_sim()]
    config.write_text(yaml.safe_dump({"endpoints": {"ep-a": {"members": members}}}))
    tokens = tmp_path / "tokens"
    tokens.write_text("# team tokens\nalpha-token team-a\n\nbeta-token\n")
    port = free_port()
    router = await asyncio.create_subprocess_exec(
        *router_command(config, port, "--auth-tokens-file", str(tokens), "--metrics-auth"),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    body = {"model": "ep-a", "prompt": "hello", "max_tokens": 1}
    try:
        async with aiohttp.ClientSession() as session:

            async def ready() -> bool:
                try:
                    async with session.get(f"{url}/readyz") as r:
                        return r.status == 200
                except aiohttp.ClientConnectionError:
                    return False

            await eventually("the router", ready)
            statuses = {}
            for name, header in [("none", {}), ("wrong", {"Authorization": "Bearer nope"}),
                                 ("alpha", {"Authorization": "Bearer alpha-token"}),
                                 ("beta", {"Authorization": "Bearer beta-token"})]:  # fmt: skip
                async with session.post(f"{url}/v1/completions", json=body, headers=header) as r:
                    statuses[name] = r.status
                async with session.get(f"{url}/metrics", headers=header) as r:
                    statuses[name + " metrics"] = r.status
            async with session.get(f"{url}/healthz") as r:
                statuses["health"] = r.status
    finally:
        router.terminate()
        _, stderr = await asyncio.wait_for(router.communicate(), 30)
    assert statuses == {
        "none": 401, "none metrics": 401, "wrong": 401, "wrong metrics": 401,
        "alpha": 200, "alpha metrics": 200, "beta": 200, "beta metrics": 200, "health": 200,
    }  # fmt: skip
    assert b"alpha-token" not in stderr and b"nope" not in stderr  # tokens are never logged
