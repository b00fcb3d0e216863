"""EndpointSpec -> the manifests of a CachedEndpoint's children.

Pure: plain manifest-shaped dicts, no API calls. Create, update, resume and the periodic
resync all call these same builders, and the result is server-side applied, so the pool
converges on one desired state however the operator got there. Child names are the
CachedEndpoint's own name (deterministic, and the StatefulSet gives pods `<name>-<ordinal>`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvpin import api
from kvpin.operator import engines
from kvpin.operator.spec import EndpointSpec

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
PORT_NAME = "http"
# vLLM and SGLang load weights for minutes before /health answers; the startup probe gives
# them up to 30 minutes without making the readiness probe slow to notice a sick pod.
STARTUP_FAILURES = 180
PROBE_PERIOD_SECONDS = 10
# A busy engine answers /health slowly: a 1 s timeout would flap readiness (ring churn) or
# restart it (its cache lost). Liveness gives up only after a minute of silence.
READINESS_TIMEOUT_SECONDS = 5
LIVENESS_TIMEOUT_SECONDS = 10
# Requests given unless the spec sets them, so engine pods are Burstable, not BestEffort (the
# first evicted under node pressure). GPU engines stage weights through host memory.
DEFAULT_REQUESTS = {True: {"cpu": "2", "memory": "16Gi"}, False: {"cpu": "100m", "memory": "256Mi"}}
SHM_VOLUME = "kvpin-shm"  # /dev/shm of engines on several GPUs
PROBE_HANDLERS = ("httpGet", "exec", "tcpSocket", "grpc")


def build_selector(name: str) -> dict[str, str]:
    """The labels that select a CachedEndpoint's pods (immutable once the StatefulSet exists)."""
    return {api.LABEL_ENDPOINT: name}


def format_selector(name: str) -> str:
    """The same selector as a string, for `status.selector` (the scale subresource's)."""
    return ",".join(f"{k}={v}" for k, v in build_selector(name).items())


def build_labels(spec: EndpointSpec) -> dict[str, str]:
    """Labels on every child and pod."""
    return {
        **build_selector(spec.name),
        api.LABEL_NAME: "kvpin-engine",
        api.LABEL_MANAGED_BY: api.MANAGED_BY,
    }


def build_owner_reference(owner: Mapping[str, Any]) -> dict[str, Any]:
    """An owner reference to the CachedEndpoint, so garbage collection removes the child."""
    meta = owner["metadata"]
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(spec: EndpointSpec, owner: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "name": spec.name,
        "namespace": spec.namespace,
        "labels": build_labels(spec),
        "ownerReferences": [build_owner_reference(owner)],
    }


def build_statefulset(
    spec: EndpointSpec, owner: Mapping[str, Any], *, sim_image: str
) -> dict[str, Any]:
    """The StatefulSet: stable ordinal pods, started in parallel, rolled one at a time."""
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _metadata(spec, owner),
        "spec": {
            "replicas": spec.replicas,
            "serviceName": spec.name,
            "podManagementPolicy": "Parallel",
            # GPUs are scarce: replace one pod at a time and never ask for an extra one.
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": "Delete",
                "whenScaled": "Delete",
            },
            "selector": {"matchLabels": build_selector(spec.name)},
            "template": build_pod_template(spec, sim_image=sim_image),
            **(
                {"volumeClaimTemplates": [dict(t) for t in spec.pod.volume_claim_templates]}
                if spec.pod.volume_claim_templates
                else {}
            ),
        },
    }


def build_pod_template(spec: EndpointSpec, *, sim_image: str) -> dict[str, Any]:
    """The engine pod: pinned to GPU nodes, GPU limits, VRAM annotations, probes."""
    runtime = engines.build_runtime(spec, sim_image=sim_image)
    pod_spec: dict[str, Any] = {
        "containers": [_container(spec, runtime), *(dict(c) for c in spec.pod.sidecars)],
        "tolerations": _tolerations(spec),
        "terminationGracePeriodSeconds": (
            spec.drain.leave_ring_seconds + spec.drain.grace_period_seconds
        ),
        "enableServiceLinks": False,
    }
    affinity = _affinity(spec)
    if affinity:
        pod_spec["affinity"] = affinity
    volumes = [dict(v) for v in spec.pod.volumes]
    if spec.gpu.count > 1:  # tensor parallelism: NCCL needs more than the default 64 MiB
        shm = {"medium": "Memory", "sizeLimit": spec.pod.shm_size}
        volumes.append({"name": SHM_VOLUME, "emptyDir": shm})
    if volumes:
        pod_spec["volumes"] = volumes
    for field, value in (
        ("topologySpreadConstraints", [dict(c) for c in spec.pod.topology_spread_constraints]),
        ("priorityClassName", spec.pod.priority_class_name),
        ("runtimeClassName", spec.pod.runtime_class_name),
        ("securityContext", dict(spec.pod.security_context)),
        ("initContainers", [dict(c) for c in spec.pod.init_containers]),
    ):
        if value:
            pod_spec[field] = value
    if spec.pod.service_account_name:
        pod_spec["serviceAccountName"] = spec.pod.service_account_name
    if spec.pod.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": n} for n in spec.pod.image_pull_secrets]
    return {
        "metadata": {
            "labels": {**spec.pod.labels, **build_labels(spec)},
            "annotations": {
                **spec.pod.annotations,
                api.ANNOTATION_VRAM: spec.vram_reservation,
                api.ANNOTATION_VRAM_BYTES: str(spec.vram_reservation_bytes),
                api.ANNOTATION_ENDPOINT_ID: spec.endpoint_id,
            },
        },
        "spec": pod_spec,
    }


def _probe(spec: EndpointSpec, kind: str, **timing: int) -> dict[str, Any]:
    """The engine's probe of `kind` with spec.pod's fields merged over it; a handler given
    there replaces ours."""
    override = dict(spec.pod.probes.get(kind) or {})
    handler = {"httpGet": {"path": spec.engine.health_path, "port": PORT_NAME}}
    if any(h in override for h in PROBE_HANDLERS):
        handler = {}
    return {**handler, **timing, **override}


def _container(spec: EndpointSpec, runtime: engines.EngineRuntime) -> dict[str, Any]:
    env = [{"name": k, "value": v} for k, v in runtime.env]
    env += [{"name": k, "valueFrom": {"fieldRef": {"fieldPath": path}}}
            for k, path in runtime.field_env]  # fmt: skip
    if spec.engine.hub_token_secret:
        name, key = spec.engine.hub_token_secret
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": name, "key": key}}})
    env += [dict(e) for e in spec.pod.env]
    container: dict[str, Any] = {
        "name": "engine",
        "image": runtime.image,
        "command": list(runtime.command),
        "args": list(runtime.args),
        "ports": [{"name": PORT_NAME, "containerPort": spec.engine.port, "protocol": "TCP"}],
        "env": env,
        "resources": _resources(spec),
        "startupProbe": _probe(
            spec,
            "startupProbe",
            periodSeconds=PROBE_PERIOD_SECONDS,
            failureThreshold=STARTUP_FAILURES,
        ),
        "readinessProbe": _probe(
            spec,
            "readinessProbe",
            periodSeconds=5,
            failureThreshold=2,
            timeoutSeconds=READINESS_TIMEOUT_SECONDS,
        ),
        "livenessProbe": _probe(
            spec,
            "livenessProbe",
            periodSeconds=15,
            failureThreshold=4,
            timeoutSeconds=LIVENESS_TIMEOUT_SECONDS,
        ),
    }
    if spec.drain.leave_ring_seconds:
        # Keep serving while the pod leaves the ring (the sleep action needs no shell in the
        # image; Kubernetes 1.30+), so requests routed just before still find it listening.
        container["lifecycle"] = {"preStop": {"sleep": {"seconds": spec.drain.leave_ring_seconds}}}
    if not runtime.command:
        del container["command"]  # custom images may rely on their entrypoint
    mounts = [dict(m) for m in spec.pod.volume_mounts]
    if spec.gpu.count > 1:
        mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    if mounts:
        container["volumeMounts"] = mounts
    if spec.pod.env_from:
        container["envFrom"] = [dict(e) for e in spec.pod.env_from]
    return container


def _resources(spec: EndpointSpec) -> dict[str, Any]:
    resources = {k: dict(v) for k, v in spec.pod.resources.items() if isinstance(v, Mapping)}
    requests = resources.setdefault("requests", {})
    for name, value in DEFAULT_REQUESTS[spec.gpu.count > 0].items():
        limit = resources.get("limits", {}).get(name)
        requests.setdefault(name, limit if limit is not None else value)  # never above a limit
    if spec.gpu.count > 0:
        # Extended resources are limits only; Kubernetes sets requests equal to them.
        resources.setdefault("limits", {})[spec.gpu.resource_name] = spec.gpu.count
    return resources


def _affinity(spec: EndpointSpec) -> dict[str, Any] | None:
    """spec.pod.affinity with the operator's node requirements added to each of its required
    node terms (or as the only term): pod (anti-)affinity and preferences pass through."""
    ours = _node_affinity(spec)
    user = {k: dict(v) if isinstance(v, Mapping) else v for k, v in spec.pod.affinity.items()}
    if ours is None:
        return user or None
    mine = ours["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    expressions = mine["nodeSelectorTerms"][0]["matchExpressions"]
    node = dict(user.get("nodeAffinity") or {})
    required = dict(node.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = [dict(t) for t in required.get("nodeSelectorTerms") or []] or [{}]
    for term in terms:  # terms are ORed: each must carry the GPU requirements
        term["matchExpressions"] = [*(term.get("matchExpressions") or []), *expressions]
    required["nodeSelectorTerms"] = terms
    node["requiredDuringSchedulingIgnoredDuringExecution"] = required
    return {**user, "nodeAffinity": node}


def _node_affinity(spec: EndpointSpec) -> dict[str, Any] | None:
    """Only what the spec asks for. The GPU limit alone already pins pods to nodes that
    advertise the resource (`nvidia.com/gpu`, `amd.com/gpu`, ...), whatever labels a cluster's
    feature discovery does or does not set."""
    expressions: list[dict[str, Any]] = []
    if spec.gpu.product:
        expressions.append(
            {"key": GPU_PRODUCT_LABEL, "operator": "In", "values": [spec.gpu.product]}
        )
    expressions.extend(
        {"key": k, "operator": "In", "values": [v]} for k, v in spec.gpu.node_selector
    )
    if not expressions:
        return None
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]
            }
        }
    }


def _tolerations(spec: EndpointSpec) -> list[dict[str, Any]]:
    tolerations = [dict(t) for t in spec.gpu.tolerations]
    if spec.gpu.count > 0:
        # GPU node pools are commonly tainted so that only GPU workloads land there.
        tolerations.insert(
            0, {"key": spec.gpu.resource_name, "operator": "Exists", "effect": "NoSchedule"}
        )
    return tolerations


def build_service(spec: EndpointSpec, owner: Mapping[str, Any]) -> dict[str, Any]:
    """The headless Service that gives the StatefulSet's pods stable DNS names."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec, owner),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": False,
            "selector": build_selector(spec.name),
            "ports": [{"name": PORT_NAME, "port": spec.engine.port, "targetPort": PORT_NAME}],
        },
    }


def build_pdb(spec: EndpointSpec, owner: Mapping[str, Any]) -> dict[str, Any] | None:
    """A PodDisruptionBudget keeping all but one pod (and its cache) through drains.

    None below two replicas: a PDB on a single pod would block every node drain.
    """
    if spec.replicas < 2:
        return None
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(spec, owner),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": build_selector(spec.name)}},
    }
