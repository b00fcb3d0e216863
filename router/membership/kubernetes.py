"""Endpoints from CachedEndpoints: `status.ring` for members, `spec.routing` for routing.

I/O. One daemon thread per watched namespace (or one for the whole cluster) lists the
CachedEndpoints, then watches from the list's resourceVersion; every watch that ends (its
timeout, an error, a 410 Gone) is followed by a fresh list that replaces what was known, so a
missed event can never leave a departed member on a ring for longer than one watch period.
Events are handed to the event loop, which publishes a new snapshot.

The threads never die: any error (the API server unreachable or slow, a urllib3 timeout, a
malformed answer) is logged and counted, and the list is retried with exponential backoff
(with jitter, capped). Meanwhile the router keeps serving the last snapshot it had, and
`stale()` tells /readyz once no list or watch has succeeded for `stale_seconds`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import kubernetes.client
import kubernetes.config
import kubernetes.watch

from kvpin import api, logs
from kvpin.router import config
from kvpin.router.membership.base import Membership

log = logging.getLogger(logs.MEMBERSHIP)
WATCH_SECONDS = 60  # a relist at least this often
RETRY_SECONDS = 1.0  # the first retry after an error; doubled each time, up to RETRY_MAX
RETRY_MAX = 30.0
STALE_SECONDS = 3 * WATCH_SECONDS


def api_client(kubeconfig: str | None = None) -> kubernetes.client.ApiClient:
    """In-cluster credentials, else the kubeconfig (KUBECONFIG or ~/.kube/config)."""
    if kubeconfig:
        return kubernetes.config.new_client_from_config(config_file=kubeconfig)
    try:
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()
    return kubernetes.client.ApiClient()


def build_endpoints(objects: Sequence[Mapping[str, Any]]) -> dict[str, config.EndpointConfig]:
    """CachedEndpoints -> endpoints by id. Pure.

    An id claimed twice (several namespaces watched) goes to the oldest object; objects being
    deleted or whose spec the router cannot read are left out, with a log line.
    """
    endpoints: dict[str, config.EndpointConfig] = {}
    ordered = sorted(objects, key=api.claim_rank)
    for obj in ordered:
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        try:
            endpoint = config.endpoint_from_resource(obj)
        except config.ConfigError as err:
            log.warning("skipping %s/%s: %s", meta["namespace"], meta["name"], err)
            continue
        if endpoint.id in endpoints:
            log.warning("endpoint id %s claimed again by %s/%s; keeping the older claim",
                        endpoint.id, meta["namespace"], meta["name"])  # fmt: skip
            continue
        endpoints[endpoint.id] = endpoint
    return endpoints


class KubernetesMembership(Membership):
    """Follows CachedEndpoints in some namespaces (all when none are given)."""

    def __init__(
        self,
        namespaces: Sequence[str] = (),
        *,
        client: Callable[[], Any] = api_client,
        stale_seconds: float = STALE_SECONDS,
        watch_seconds: int = WATCH_SECONDS,
    ) -> None:
        super().__init__()
        self.namespaces = tuple(namespaces) or (None,)
        self.stale_seconds = stale_seconds
        self.watch_seconds = watch_seconds
        self._client_factory = client
        self._synced: dict[str | None, float] = {}  # namespace -> last time the API answered
        self._objects: dict[str | None, dict[tuple[str, str], Mapping[str, Any]]] = {}
        self._stopping = threading.Event()
        self._listed: set[str | None] = set()
        self._first_list = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        custom = kubernetes.client.CustomObjectsApi(self._client_factory())
        for namespace in self.namespaces:
            threading.Thread(
                target=self._follow, args=(custom, namespace), daemon=True,
                name=f"watch-{namespace or 'all'}",
            ).start()  # fmt: skip
        await self._first_list.wait()

    async def stop(self) -> None:
        self._stopping.set()  # threads end within one watch period; they are daemons

    def stale(self) -> str | None:
        now = time.monotonic()
        for namespace in self.namespaces:
            age = now - self._synced.get(namespace, now)
            if age > self.stale_seconds:
                return (f"CachedEndpoints ({namespace or 'all namespaces'}) not read for "
                        f"{age:.0f}s; serving the last membership")  # fmt: skip
        return None

    # -- in the watch threads ---------------------------------------------------------------

    def _call(self, callback: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(callback, *args)

    def _follow(self, custom: kubernetes.client.CustomObjectsApi, namespace: str | None) -> None:
        args: tuple[Any, ...] = (api.GROUP, api.VERSION)
        if namespace:
            lister: Any = custom.list_namespaced_custom_object
            args = (*args, namespace, api.PLURAL)
        else:
            lister = custom.list_cluster_custom_object
            args = (*args, api.PLURAL)
        delay = RETRY_SECONDS
        while not self._stopping.is_set():
            try:
                listed = lister(*args, _request_timeout=self.watch_seconds)
                self._synced[namespace] = time.monotonic()
                self._call(self._replace, namespace, listed.get("items") or [])
                version = listed["metadata"]["resourceVersion"]
                delay = RETRY_SECONDS
                watch = kubernetes.watch.Watch()
                for event in watch.stream(
                    lister, *args, resource_version=version, timeout_seconds=self.watch_seconds,
                    allow_watch_bookmarks=True, _request_timeout=self.watch_seconds + 10,
                ):  # fmt: skip
                    self._synced[namespace] = time.monotonic()
                    if self._stopping.is_set():
                        watch.stop()
                        break
                    kind = event.get("type")
                    if kind == "ERROR":
                        break  # e.g. 410 Gone: relist
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        self._call(self._apply, namespace, kind, event["raw_object"])
                else:
                    self._synced[namespace] = time.monotonic()  # a watch that ran its course
            except Exception as err:  # whatever it was, the watch goes on
                log.warning("reading CachedEndpoints (%s) failed, retrying in %.1fs: %s: %s",
                            namespace or "all namespaces", delay, type(err).__name__,
                            err)  # fmt: skip
                self._call(self._count_error)
                self._stopping.wait(delay * random.uniform(0.5, 1.0))
                delay = min(delay * 2, RETRY_MAX)

    # -- on the event loop ------------------------------------------------------------------

    def _count_error(self) -> None:
        if self.metrics:
            self.metrics.of(self.metrics.membership_errors, "kubernetes").inc()

    @staticmethod
    def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
        return (obj["metadata"]["namespace"], obj["metadata"]["name"])

    def _replace(self, namespace: str | None, items: Sequence[Mapping[str, Any]]) -> None:
        self._objects[namespace] = {self._key(o): o for o in items}
        self._listed.add(namespace)
        self._republish()
        if len(self._listed) == len(self.namespaces):
            self._first_list.set()

    def _apply(self, namespace: str | None, kind: str, obj: Mapping[str, Any]) -> None:
        objects = self._objects.setdefault(namespace, {})
        if kind == "DELETED":
            objects.pop(self._key(obj), None)
        else:
            objects[self._key(obj)] = obj
        self._republish()

    def _republish(self) -> None:
        everything = [o for objects in self._objects.values() for o in objects.values()]
        self.publish(build_endpoints(everything))
