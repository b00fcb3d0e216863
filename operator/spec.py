"""CachedEndpoint `spec` -> EndpointSpec, with the schema's defaults applied again.

Pure. The CRD schema applies the same defaults and rejects most nonsense at admission; this
module re-checks so that objects stored before a schema change, or an API server that skipped
validation, can never crash the operator: anything it cannot use raises SpecError with a
sentence a person can act on.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from kvpin.operator import gpus, models, quantity, vram

PRESETS = ("vllm", "sglang", "sim", "custom")
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")
KEY_MODES = ("prefix", "session", "endpoint")
DEFAULT_PORT = 8000
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_LOAD_FACTOR = 2.0  # a hard cap; the router places by cost (router.placement)
DEFAULT_VIRTUAL_NODES = 160
DEFAULT_SESSION_HEADER = "X-Session-ID"
# The operator sees the pod's deletion, republishes status.ring and routers' watches follow:
# about a second on a healthy control plane (tests/controlplane measures it); 10 s of margin.
DEFAULT_LEAVE_RING_SECONDS = 10
DEFAULT_GRACE_PERIOD_SECONDS = 180  # a long generation: 8k tokens at ~50 tokens/s
MAX_DRAIN_SECONDS = 3600
DEFAULT_PROGRESS_DEADLINE_SECONDS = 1800
DEFAULT_SHM_SIZE = "8Gi"  # a 70B model can take many minutes to load
# StatefulSet pods are named "<name>-<ordinal>" and carry a "<name>-<hash>" revision label,
# both limited to 63 characters, so the CachedEndpoint's name is capped lower.
MAX_NAME_LENGTH = 52
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class SpecError(ValueError):
    """The spec cannot be turned into a pool; the message says what to change."""


@dataclasses.dataclass(frozen=True)
class EngineSpec:
    """Which inference engine runs in each pod."""

    preset: str = "vllm"
    image: str | None = None  # None: the preset's image
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()  # appended to a preset's own arguments
    port: int = DEFAULT_PORT
    health_path: str = "/health"  # readiness probe path on the engine's port
    hub_token_secret: tuple[str, str] | None = None
    """(Secret name, key) of the model hub's token, given to the engine as HF_TOKEN."""


@dataclasses.dataclass(frozen=True)
class GpuSpec:
    """The GPUs of one pod and the nodes that may hold it."""

    count: int = 1
    resource_name: str = DEFAULT_GPU_RESOURCE
    product: str | None = None  # e.g. NVIDIA-A100-SXM4-80GB (node label nvidia.com/gpu.product)
    memory_bytes: int | None = None
    """Per GPU (or MIG slice): spec.gpu.memory, else what kvpin knows of the product."""
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Mapping[str, Any], ...] = ()


@dataclasses.dataclass(frozen=True)
class RoutingSpec:
    """How the router keys this endpoint's requests (it reads these from the spec)."""

    key: str = "prefix"
    load_factor: float = DEFAULT_LOAD_FACTOR
    virtual_nodes: int = DEFAULT_VIRTUAL_NODES
    session_header: str = DEFAULT_SESSION_HEADER


@dataclasses.dataclass(frozen=True)
class PodOverrides:
    """Pod fields a real deployment needs, passed through as Kubernetes wrote them."""

    env: tuple[Mapping[str, Any], ...] = ()
    resources: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    volumes: tuple[Mapping[str, Any], ...] = ()
    volume_mounts: tuple[Mapping[str, Any], ...] = ()
    service_account_name: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    env_from: tuple[Mapping[str, Any], ...] = ()
    affinity: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Merged with the operator's own node affinity (the GPU product, the node selector)."""
    topology_spread_constraints: tuple[Mapping[str, Any], ...] = ()
    priority_class_name: str | None = None
    runtime_class_name: str | None = None
    security_context: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """The pod's; the engine container keeps the image's user unless this says otherwise."""
    init_containers: tuple[Mapping[str, Any], ...] = ()
    sidecars: tuple[Mapping[str, Any], ...] = ()
    """Containers beside the engine (a log shipper, a model puller)."""
    shm_size: str = DEFAULT_SHM_SIZE
    """/dev/shm for engines on several GPUs (NCCL's shared memory); the default 64 MiB is not
    enough for tensor parallelism."""
    probes: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    """startupProbe, readinessProbe, livenessProbe: fields merged over the engine's own."""
    volume_claim_templates: tuple[Mapping[str, Any], ...] = ()
    """Claims each pod keeps across restarts (a model cache), as a StatefulSet's."""


@dataclasses.dataclass(frozen=True)
class DrainSpec:
    """How a pod leaves: out of the ring first, then its in-flight generations finish."""

    leave_ring_seconds: int = DEFAULT_LEAVE_RING_SECONDS
    """The pod keeps serving this long after it is told to stop (a preStop sleep), while the
    operator takes it out of status.ring and routers follow; no new request reaches it after."""
    grace_period_seconds: int = DEFAULT_GRACE_PERIOD_SECONDS
    """Then the engine gets SIGTERM and this long to finish the generations in flight."""


@dataclasses.dataclass(frozen=True)
class EndpointSpec:
    """Everything the operator needs to render one CachedEndpoint's children."""

    name: str
    namespace: str
    endpoint_id: str
    model: str
    replicas: int
    memory: vram.PodMemory
    """The KV-cache reservation and what is known of the weights and GPUs around it."""
    engine: EngineSpec
    gpu: GpuSpec
    routing: RoutingSpec
    pod: PodOverrides
    drain: DrainSpec = DrainSpec()
    progress_deadline_s: int = DEFAULT_PROGRESS_DEADLINE_SECONDS

    @property
    def vram_reservation(self) -> str:
        """spec.vramReservation as written."""
        return self.memory.reservation

    @property
    def vram_reservation_bytes(self) -> int:
        """The KV-cache budget of one pod, in bytes."""
        return self.memory.kv_bytes


def parse(body: Mapping[str, Any]) -> EndpointSpec:
    """Build an EndpointSpec from a whole CachedEndpoint object."""
    meta = _mapping(body.get("metadata"), "metadata")
    spec = _mapping(body.get("spec"), "spec")
    name = str(meta.get("name") or "")
    if len(name) > MAX_NAME_LENGTH:
        raise SpecError(f"metadata.name must be at most {MAX_NAME_LENGTH} characters")
    endpoint_id = str(spec.get("endpointId") or name)
    if not _DNS_LABEL.match(endpoint_id) or len(endpoint_id) > 63:
        raise SpecError(f"spec.endpointId {endpoint_id!r} must be a DNS label (a-z, 0-9, '-')")
    model = spec.get("model")
    if not isinstance(model, str) or not model:
        raise SpecError("spec.model is required: the model the engine serves")
    replicas = _int(spec.get("replicas", 1), "spec.replicas", minimum=0)
    reservation = spec.get("vramReservation")
    if reservation is None:
        raise SpecError("spec.vramReservation is required, e.g. 40Gi")
    reservation_bytes = _bytes(reservation, "spec.vramReservation")
    engine = _engine(_mapping(spec.get("engine", {}), "spec.engine"))
    gpu = _gpu(_mapping(spec.get("gpu", {}), "spec.gpu"), engine.preset)
    memory = _memory(spec, model, str(reservation), reservation_bytes, gpu)
    problem = vram.fit_error(memory)
    if problem:
        raise SpecError(problem)
    return EndpointSpec(
        name=name,
        namespace=str(meta.get("namespace") or "default"),
        endpoint_id=endpoint_id,
        model=model,
        replicas=replicas,
        memory=memory,
        engine=engine,
        gpu=gpu,
        routing=_routing(_mapping(spec.get("routing", {}), "spec.routing")),
        pod=_pod(_mapping(spec.get("pod", {}), "spec.pod")),
        drain=_drain(_mapping(spec.get("drain", {}), "spec.drain")),
        progress_deadline_s=_int(
            spec.get("progressDeadlineSeconds", DEFAULT_PROGRESS_DEADLINE_SECONDS),
            "spec.progressDeadlineSeconds", minimum=1,
        ),
    )  # fmt: skip


def _memory(
    spec: Mapping[str, Any], model: str, reservation: str, reservation_bytes: int, gpu: GpuSpec
) -> vram.PodMemory:
    """What is known of the pod's GPU memory: the GPUs' size, the weights' (spec.weightsMemory,
    else the model's known size)."""
    weights, source = None, ""
    if spec.get("weightsMemory") is not None:
        weights, source = _bytes(spec["weightsMemory"], "spec.weightsMemory"), "spec.weightsMemory"
    elif (known := models.weights_of(model)) is not None:
        weights, source = known, f"{model} in bf16"
    return vram.PodMemory(
        reservation=reservation,
        kv_bytes=reservation_bytes,
        gpus=gpu.count,
        gpu_bytes=gpu.memory_bytes,
        gpu_name=gpu.product or "",
        weights_bytes=weights,
        weights_source=source,
    )


def _bytes(value: Any, where: str) -> int:
    try:
        size = quantity.parse_bytes(str(value))
    except quantity.QuantityError as err:
        raise SpecError(f"{where}: {err}") from err
    if size <= 0:
        raise SpecError(f"{where} must be positive")
    return size


def _drain(raw: Mapping[str, Any]) -> DrainSpec:
    leave = _int(raw.get("leaveRingSeconds", DEFAULT_LEAVE_RING_SECONDS),
                 "spec.drain.leaveRingSeconds", minimum=0)  # fmt: skip
    grace = _int(raw.get("gracePeriodSeconds", DEFAULT_GRACE_PERIOD_SECONDS),
                 "spec.drain.gracePeriodSeconds", minimum=1)  # fmt: skip
    if leave > MAX_DRAIN_SECONDS or grace > MAX_DRAIN_SECONDS:
        raise SpecError(f"spec.drain: at most {MAX_DRAIN_SECONDS} seconds each")
    return DrainSpec(leave, grace)


def _engine(raw: Mapping[str, Any]) -> EngineSpec:
    preset = raw.get("preset", "vllm")
    if preset not in PRESETS:
        raise SpecError(f"spec.engine.preset {preset!r} is not one of {', '.join(PRESETS)}")
    image = raw.get("image") or None
    command = _strings(raw.get("command", []), "spec.engine.command")
    if preset == "custom" and not image:
        raise SpecError("spec.engine.preset custom needs spec.engine.image")
    port = _int(raw.get("port", DEFAULT_PORT), "spec.engine.port", minimum=1)
    if port > 65535:
        raise SpecError("spec.engine.port must be at most 65535")
    return EngineSpec(
        preset=preset,
        image=image,
        command=command,
        args=_strings(raw.get("args", []), "spec.engine.args"),
        port=port,
        health_path=str(raw.get("healthPath") or "/health"),
        hub_token_secret=_secret_ref(raw.get("hubTokenSecret"), "spec.engine.hubTokenSecret"),
    )


def _secret_ref(raw: Any, where: str) -> tuple[str, str] | None:
    if raw is None:
        return None
    ref = _mapping(raw, where)
    name, key = ref.get("name"), ref.get("key", "token")
    if not isinstance(name, str) or not name or not isinstance(key, str) or not key:
        raise SpecError(f"{where} needs the Secret's name (and a key, default token)")
    return name, key


def _gpu(raw: Mapping[str, Any], preset: str) -> GpuSpec:
    count = _int(raw.get("count", 1), "spec.gpu.count", minimum=0)
    if count == 0 and preset in ("vllm", "sglang"):
        raise SpecError(f"spec.gpu.count must be at least 1 for the {preset} engine")
    product = raw.get("product") or None
    resource_name = str(raw.get("resourceName") or DEFAULT_GPU_RESOURCE)
    if raw.get("memory") is not None:
        memory_bytes: int | None = _bytes(raw["memory"], "spec.gpu.memory")
    else:
        memory_bytes = gpus.memory_of(product, resource_name)
    selector = _mapping(raw.get("nodeSelector", {}), "spec.gpu.nodeSelector")
    tolerations = raw.get("tolerations", [])
    if not isinstance(tolerations, list) or not all(isinstance(t, Mapping) for t in tolerations):
        raise SpecError("spec.gpu.tolerations must be a list of tolerations")
    return GpuSpec(
        count=count,
        resource_name=resource_name,
        product=product,
        memory_bytes=memory_bytes,
        node_selector=tuple(sorted((str(k), str(v)) for k, v in selector.items())),
        tolerations=tuple(tolerations),
    )


def _routing(raw: Mapping[str, Any]) -> RoutingSpec:
    key = raw.get("key", "prefix")
    if key not in KEY_MODES:
        raise SpecError(f"spec.routing.key {key!r} is not one of {', '.join(KEY_MODES)}")
    load_factor = raw.get("loadFactor", DEFAULT_LOAD_FACTOR)
    if isinstance(load_factor, bool) or not isinstance(load_factor, int | float):
        raise SpecError("spec.routing.loadFactor must be a number")
    if load_factor < 1.0:
        raise SpecError("spec.routing.loadFactor must be at least 1.0")
    return RoutingSpec(
        key=key,
        load_factor=float(load_factor),
        virtual_nodes=_int(
            raw.get("virtualNodes", DEFAULT_VIRTUAL_NODES), "spec.routing.virtualNodes", minimum=1
        ),
        session_header=str(raw.get("sessionHeader") or DEFAULT_SESSION_HEADER),
    )


def _resources(raw: Any) -> Mapping[str, Any]:
    """spec.pod.resources, every amount a Kubernetes quantity (the API server would refuse the
    StatefulSet with a conversion error that names no field)."""
    resources = _mapping(raw, "spec.pod.resources")
    for kind in ("limits", "requests"):
        for name, amount in _mapping(resources.get(kind, {}), f"spec.pod.resources.{kind}").items():
            if isinstance(amount, bool) or not (
                isinstance(amount, int | float) or quantity.is_quantity(str(amount))
            ):
                raise SpecError(
                    f"spec.pod.resources.{kind}.{name}: {amount!r} is not a quantity "
                    "(examples: 2, 500m, 16Gi)"
                )
    return resources


def _pod(raw: Mapping[str, Any]) -> PodOverrides:
    secrets = raw.get("imagePullSecrets", [])
    return PodOverrides(
        env=_mappings(raw.get("env", []), "spec.pod.env"),
        resources=_resources(raw.get("resources", {})),
        volumes=_mappings(raw.get("volumes", []), "spec.pod.volumes"),
        volume_mounts=_mappings(raw.get("volumeMounts", []), "spec.pod.volumeMounts"),
        service_account_name=raw.get("serviceAccountName") or None,
        image_pull_secrets=tuple(
            str(s["name"]) if isinstance(s, Mapping) else str(s) for s in secrets
        ),
        labels=_string_map(raw.get("labels", {}), "spec.pod.labels"),
        annotations=_string_map(raw.get("annotations", {}), "spec.pod.annotations"),
        env_from=_mappings(raw.get("envFrom", []), "spec.pod.envFrom"),
        affinity=_mapping(raw.get("affinity", {}), "spec.pod.affinity"),
        topology_spread_constraints=_mappings(
            raw.get("topologySpreadConstraints", []), "spec.pod.topologySpreadConstraints"
        ),
        priority_class_name=raw.get("priorityClassName") or None,
        runtime_class_name=raw.get("runtimeClassName") or None,
        security_context=_mapping(raw.get("securityContext", {}), "spec.pod.securityContext"),
        init_containers=_mappings(raw.get("initContainers", []), "spec.pod.initContainers"),
        sidecars=_mappings(raw.get("sidecars", []), "spec.pod.sidecars"),
        shm_size=_shm(raw.get("shmSize", DEFAULT_SHM_SIZE)),
        probes={
            kind: _mapping(raw[kind], f"spec.pod.{kind}")
            for kind in PROBES
            if raw.get(kind) is not None
        },
        volume_claim_templates=_claim_templates(raw.get("volumeClaimTemplates", [])),
    )


def _claim_templates(raw: Any) -> tuple[Mapping[str, Any], ...]:
    templates = _mappings(raw, "spec.pod.volumeClaimTemplates")
    for i, template in enumerate(templates):
        name = (_mapping(template.get("metadata"), f"spec.pod.volumeClaimTemplates[{i}]"
                         ".metadata")).get("name")  # fmt: skip
        if not isinstance(name, str) or not _DNS_LABEL.match(name):
            raise SpecError(f"spec.pod.volumeClaimTemplates[{i}].metadata.name must be a DNS label")
    return templates


def _shm(value: Any) -> str:
    try:
        if quantity.parse_bytes(str(value)) <= 0:
            raise quantity.QuantityError("must be positive")
    except quantity.QuantityError as err:
        raise SpecError(f"spec.pod.shmSize: {err}") from None
    return str(value)


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(f"{where} must be an object")
    return value


def _string_map(value: Any, where: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in _mapping(value, where).items()}


def _mappings(value: Any, where: str) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise SpecError(f"{where} must be a list of objects")
    return tuple(value)


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(f"{where} must be a list of strings")
    return tuple(value)


def _int(value: Any, where: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{where} must be a whole number")
    if value < minimum:
        raise SpecError(f"{where} must be at least {minimum}")
    return value
