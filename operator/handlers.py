"""kopf handlers for CachedEndpoints, registered on an explicit registry.

Handlers are plain functions, a few lines each: they call `reconciling` and translate its
outcome for kopf (Events, retry or give up). `build_registry` wires them, so every test and
every `kvpin operator` process gets a fresh registry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import kopf
import kubernetes.client
import kubernetes.config
import prometheus_client

from kvpin import api, logs
from kvpin.operator import claims, cluster, metrics, reconciling, status
from kvpin.operator import settings as settings_module

RETRY_DELAY_SECONDS = 5.0


def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Apply kvpin's kopf settings, connect the API client, serve metrics."""
    config: settings_module.OperatorConfig = memo.config
    settings_module.apply_kopf_settings(settings, config)
    memo.cluster = cluster.Cluster(_api_client())
    memo.locks = reconciling.StatusLocks()
    if config.metrics_port:
        prometheus_client.start_http_server(config.metrics_port, addr=config.liveness_host)


def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """kopf's own client logs in the way the kubernetes client does (in-cluster or kubeconfig)."""
    return kopf.login_via_client(**kwargs)


async def start_resync(memo: kopf.Memo, **_: Any) -> None:
    """Reconcile every CachedEndpoint every `resync_seconds`, repairing drift the events
    missed. Not a kopf timer: kopf puts a finalizer on every object a timer runs for, and an
    object with a finalizer cannot be deleted while the operator is gone (after `helm
    uninstall`, or with its namespace or the CRD). Started from a kopf handler, so the Events
    it posts go through kopf like any handler's."""
    memo.resync = asyncio.get_running_loop().create_task(_resync_forever(memo))


async def stop_resync(memo: kopf.Memo, **_: Any) -> None:
    task = getattr(memo, "resync", None)
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _resync_forever(memo: kopf.Memo) -> None:
    config: settings_module.OperatorConfig = memo.config
    log = logging.getLogger(logs.OPERATOR)
    while True:
        await asyncio.sleep(config.resync_seconds)
        try:
            bodies = await asyncio.to_thread(memo.cluster.list_all_endpoints, config.namespaces)
        except cluster.ClusterError as err:
            metrics.ERRORS.inc()
            log.warning("resync: %s", err)
            continue
        for body in bodies:
            if body["metadata"].get("deletionTimestamp"):
                continue
            try:
                await asyncio.to_thread(reconcile_endpoint, body, memo)
            except (kopf.TemporaryError, kopf.PermanentError) as err:
                log.info("resync of %s/%s: %s", body["metadata"]["namespace"],
                         body["metadata"]["name"], err)  # fmt: skip


def reconcile_endpoint(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Create, update, resume and resync: converge the children, then the status."""
    started = time.monotonic()
    try:
        outcome = reconciling.reconcile(
            body, cluster=memo.cluster, config=memo.config, locks=memo.locks
        )
    except cluster.ClusterError as err:
        metrics.ERRORS.inc()
        metrics.RECONCILES.labels("error").inc()
        raise kopf.TemporaryError(str(err), delay=RETRY_DELAY_SECONDS) from err
    finally:
        metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)
    if outcome is None:
        return  # deleted while reconciling
    _post(outcome)
    metrics.RECONCILES.labels("degraded" if outcome.problem else "ok").inc()
    if outcome.problem and outcome.problem.reason in (
        status.REASON_INVALID_SPEC,
        status.REASON_CHILD_REJECTED,
    ):
        # Retrying cannot help until the spec changes, which triggers a new reconcile.
        raise kopf.PermanentError(outcome.problem.message)


def refresh_endpoint(
    labels: kopf.Labels, namespace: str, memo: kopf.Memo, logger: logging.Logger, **_: Any
) -> None:
    """A pod or the StatefulSet changed: recompute the status so status.ring follows at once."""
    try:
        outcome = reconciling.refresh(
            namespace,
            labels[api.LABEL_ENDPOINT],
            cluster=memo.cluster,
            config=memo.config,
            locks=memo.locks,
            trigger="child",
        )
    except cluster.ClusterError as err:
        # Event handlers are not retried; the periodic resync repairs what this missed.
        metrics.ERRORS.inc()
        logger.info("status refresh failed, the resync will repair it: %s", err)
        return
    if outcome is not None:
        _post(outcome)


def repair_endpoint(
    *,
    type: str | None,  # kopf's name for the watch event's type
    body: kopf.Body,
    labels: kopf.Labels,
    namespace: str,
    memo: kopf.Memo,
    logger: logging.Logger,
    **_: Any,
) -> None:
    """A child was deleted or its spec edited: reconcile its endpoint now (applying is
    idempotent), not at the next resync. Our own applies come back here once and change
    nothing. A StatefulSet's status updates only refresh the status."""
    meta = body.get("metadata") or {}
    edited = type == "MODIFIED" and (
        body.get("kind") != "StatefulSet"
        or meta.get("generation") != (body.get("status") or {}).get("observedGeneration")
    )
    if type != "DELETED" and not edited:
        if body.get("kind") == "StatefulSet":
            refresh_endpoint(labels=labels, namespace=namespace, memo=memo, logger=logger)
        return
    owner = next((ref for ref in meta.get("ownerReferences") or [] if ref.get("kind") == api.KIND),
                 None)  # fmt: skip
    if owner is None:
        return
    identity = {"metadata": {"namespace": namespace, "name": owner["name"], "uid": owner["uid"]}}
    try:
        reconcile_endpoint(identity, memo)  # type: ignore[arg-type]
    except (kopf.TemporaryError, kopf.PermanentError) as err:
        logger.info("repair of %s: %s (the resync retries)", owner["name"], err)


def release_endpoint(
    *, type: str | None, body: kopf.Body, memo: kopf.Memo, logger: logging.Logger, **_: Any
) -> None:
    """A CachedEndpoint is gone: forget its lock and metric series, and reconcile at once any
    other that claims its endpoint id (it wins the id now, not at the next resync)."""
    if type != "DELETED":
        return
    meta = body["metadata"]
    memo.locks.forget(meta["namespace"], meta["name"])
    metrics.forget_endpoint(meta["namespace"], meta["name"])
    released = claims.endpoint_id_of(body)
    try:
        others = memo.cluster.list_all_endpoints(memo.config.namespaces)
    except cluster.ClusterError as err:
        logger.info("after the deletion of %s: %s (the resync repairs)", meta["name"], err)
        return
    for other in others:
        if claims.endpoint_id_of(other) == released and other["metadata"]["uid"] != meta["uid"]:
            try:
                reconcile_endpoint(other, memo)  # type: ignore[arg-type]
            except (kopf.TemporaryError, kopf.PermanentError) as err:
                logger.info("claim of %s: %s (the resync retries)", other["metadata"]["name"], err)


def _post(outcome: reconciling.Outcome) -> None:
    for event in outcome.events:
        kopf.event(outcome.endpoint, type=event.type, reason=event.reason, message=event.message)


def _api_client() -> kubernetes.client.ApiClient:
    try:
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()
    return kubernetes.client.ApiClient()


def build_registry(config: settings_module.OperatorConfig) -> kopf.OperatorRegistry:
    """A registry with every handler of the operator."""
    registry = kopf.OperatorRegistry()
    cep = (api.GROUP, api.VERSION, api.PLURAL)
    kopf.on.startup(registry=registry)(startup)
    kopf.on.login(registry=registry)(login)
    for on in (kopf.on.resume, kopf.on.create, kopf.on.update):
        on(*cep, registry=registry, id="reconcile")(reconcile_endpoint)
    kopf.on.startup(registry=registry)(start_resync)
    kopf.on.cleanup(registry=registry)(stop_resync)
    kopf.on.event(*cep, registry=registry)(release_endpoint)
    owned = settings_module.CHILD_LABELS  # the API server filters too (apply_kopf_settings)
    kopf.on.event(*settings_module.POD_RESOURCE, labels=owned, registry=registry)(refresh_endpoint)
    for resource in settings_module.CHILD_RESOURCES:
        kopf.on.event(*resource, labels=owned, registry=registry)(repair_endpoint)
    return registry
