"""A CachedEndpoint scaled up, down and rolled under steady load through `kvpin router
--kubernetes`: no client sees an error, and every engine is warmed before its first user
request.

KWOK runs no containers, so this test plays the kubelet's part for the engines: for every pod
with an IP it starts a `kvpin sim` on that (loopback) address and marks the pod Ready once the
sim answers (its readiness probe; KWOK holds such pods un-Ready: cluster.probed_ready_stages),
and when a pod goes away it keeps that sim serving for a drain delay (as the pod's preStop
sleep would) before stopping it with SIGTERM (which lets requests in flight finish). KWOK may
give a new pod the address of one that just left; its sim then starts once the old one has
stopped, as a real pod's would only get an address no container holds. Each sim records whether
each request it received was a warm-up (`--debug-routes`, GET /debug/arrivals). That a warming
member gets no user request even when its engine already listens is checked precisely on
loopback (tests/integration/test_router_warmup.py); here, the whole path: `spec.routing.warmup`
from the API server to the router, the warm-up header to the engines, no error through the
changes.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import threading
import time
import urllib.request
from typing import Any

import openai
import pytest

from kvpin import api
from tests.controlplane import cluster
from tests.controlplane.kube import Kube, http_ok, wait_for
from tests.controlplane.test_router_kubernetes import (
    KVPIN,
    kubernetes_router,
    members_of,
    processes,
    ready_pods,
)

pytestmark = [pytest.mark.controlplane, pytest.mark.usefixtures("operator_process")]
DRAIN_S = 3.0  # the harness's preStop delay: routers see a pod leave in about a second
SYSTEM = "You are the support agent of a large online shop; be precise and kind. " * 60


class Engines:
    """A `kvpin sim` for every pod of the endpoint that has an IP, following the pods."""

    def __init__(self, client: Kube, namespace: str, name: str, port: int) -> None:
        self.client, self.namespace, self.name, self.port = client, namespace, name, port
        self.running: dict[str, tuple[str, subprocess.Popen[bytes]]] = {}  # pod uid -> sim
        self.draining: list[tuple[float, str, subprocess.Popen[bytes]]] = []  # until, url, sim
        self.probing: dict[str, str] = {}  # pod uid -> pod name, until its sim answers
        self.started: list[str] = []  # every sim's base URL, in start order
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, daemon=True)

    def __enter__(self) -> Engines:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)
        for proc in [*(p for _, p in self.running.values()), *(p for *_, p in self.draining)]:
            proc.terminate()
            proc.wait(10)

    def _url(self, ip: str) -> str:
        return f"http://{ip}:{self.port}"

    def _follow(self) -> None:
        while not self._stop.wait(0.1):
            pods = {
                p["metadata"]["uid"]: (p["metadata"]["name"], p["status"]["podIP"])
                for p in self.client.pods(self.namespace, self.name)
                if p.get("status", {}).get("podIP") and not p["metadata"].get("deletionTimestamp")
            }
            for uid in self.running.keys() - pods.keys():  # gone: drain, then stop
                ip, proc = self.running.pop(uid)
                self.probing.pop(uid, None)
                self.draining.append((time.monotonic() + DRAIN_S, self._url(ip), proc))
            now = time.monotonic()
            for entry in [d for d in self.draining if d[0] <= now]:
                entry[2].terminate()
                entry[2].wait(10)
                self.draining.remove(entry)
            held = {url for _, url, _ in self.draining}
            for uid in pods.keys() - self.running.keys():
                name, ip = pods[uid]
                if self._url(ip) not in held:  # else: once the sim that left it has stopped
                    self._start(uid, ip)
                    self.probing[uid] = name
            for uid, name in list(self.probing.items()):
                if http_ok(f"{self._url(self.running[uid][0])}/health"):
                    self.client.mark_ready(self.namespace, name)
                    del self.probing[uid]

    def _start(self, uid: str, ip: str) -> None:
        url = self._url(ip)
        proc = subprocess.Popen(
            [str(KVPIN), "sim", "--host", ip, "--port", str(self.port), "--served-model-name",
             self.name, "--time-scale", "0", "--debug-routes", "--log-level", "WARNING"],
            env=os.environ.copy(),
        )  # fmt: skip
        self.running[uid] = (ip, proc)
        self.started.append(url)


class Load:
    """Requests through the router one after another, from a thread, until stopped."""

    def __init__(self, router: str, model: str) -> None:
        self.sdk = openai.OpenAI(base_url=f"{router}/v1", api_key="x", max_retries=0)
        self.model = model
        self.served: list[str] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            i += 1
            messages: list[Any] = [{"role": "system", "content": SYSTEM},
                                   {"role": "user", "content": f"question {i}"}]  # fmt: skip
            try:
                raw = self.sdk.chat.completions.with_raw_response.create(
                    model=self.model, max_tokens=2, messages=messages, user=f"user-{i}"
                )
                self.served.append(raw.headers["x-kvpin-member"])
            except openai.APIError as err:
                self.errors.append(repr(err))


def arrivals(url: str) -> list[str]:
    with urllib.request.urlopen(f"{url}/debug/arrivals", timeout=5) as r:
        return list(json.loads(r.read()))


def test_scaling_and_rolling_under_load_loses_nothing_and_warms_every_engine(
    control_plane: cluster.ControlPlane, client: Kube, namespace: str
) -> None:
    port = random.randint(20_000, 30_000)
    warmup = {"timeoutSeconds": 20, "prompts": [{"messages": [{"role": "system",
                                                               "content": SYSTEM}]}]}  # fmt: skip
    body: dict[str, Any] = {
        "apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": "ep-roll"},
        "spec": {"model": "sim-8b", "replicas": 2, "vramReservation": "1Gi",
                 "engine": {"preset": "sim", "port": port}, "gpu": {"count": 0},
                 "pod": {"annotations": {cluster.READY_BY_PROBE: "true"}},  # Engines: probe
                 "routing": {"key": "session", "warmup": warmup}},  # users spread
    }  # fmt: skip
    client.create_endpoint(namespace, body)
    with (
        processes() as started,
        Engines(client, namespace, "ep-roll", port) as engines,
    ):
        router, proc = kubernetes_router(control_plane, namespace)
        started.append(proc)
        wait_for("router sees 2 members", lambda: members_of(router).get("ep-roll") == 2)

        def pool(n: int) -> dict[str, str] | None:
            pods = ready_pods(client, namespace, "ep-roll")
            return pods if len(pods) == n and members_of(router).get("ep-roll") == n else None

        with Load(router, "ep-roll") as load:
            wait_for("traffic", lambda: len(load.served) >= 20)
            control_plane.kubectl("scale", "-n", namespace, "cep/ep-roll", "--replicas=3")
            wait_for("3 members", lambda: pool(3), timeout=60)
            wait_for("the third pod served", lambda: "ep-roll-2" in load.served[-50:], 60)
            control_plane.kubectl("scale", "-n", namespace, "cep/ep-roll", "--replicas=2")
            wait_for("2 members", lambda: pool(2), timeout=60)
            before = {p["metadata"]["uid"] for p in client.pods(namespace, "ep-roll")}
            client.patch_endpoint(  # a spec change: every pod is replaced, one at a time
                namespace, "ep-roll", {"spec": {"pod": {"annotations": {"rollout": "2"}}}}
            )

            def rolled() -> bool:
                pods = client.pods(namespace, "ep-roll")
                uids = {p["metadata"]["uid"] for p in pods}
                return len(pods) == 2 and not uids & before and pool(2) is not None

            wait_for("the rollout", rolled, timeout=120)
            served = len(load.served)
            wait_for("traffic after the rollout", lambda: len(load.served) >= served + 20, 60)

        assert load.errors == []
        assert len(engines.started) >= 5  # 2, a third, and 2 replacements
        warmed = 0
        for url in engines.started:
            if not http_ok(f"{url}/health"):
                continue  # stopped: a pod that left
            seen = arrivals(url)
            assert seen and seen[0] == "warmup", (url, seen[:5])
            warmed += "user" in seen
        assert warmed >= 2  # the replacements were warmed, then served users
