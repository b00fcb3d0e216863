import json
import os
import pathlib
import subprocess
import sys
from typing import Any

from kvpin import api
from kvpin.operator import desired, spec
from tests import factories

ROOT = pathlib.Path(__file__).resolve().parents[3]


def render(**override: Any) -> tuple[dict, dict, dict | None]:
    body = factories.endpoint(**override)
    parsed = spec.parse(body)
    return (
        desired.build_statefulset(parsed, body, sim_image="kvpin:test"),
        desired.build_service(parsed, body),
        desired.build_pdb(parsed, body),
    )


def gpu_endpoint(**override: Any) -> dict[str, Any]:
    return {
        "engine": {"preset": "vllm"},
        "gpu": {"count": 2, "product": "NVIDIA-A100-SXM4-80GB"},
        "vramReservation": "40Gi",
        **override,
    }


def test_children_are_owned_named_and_labelled() -> None:
    sts, svc, pdb = render()
    assert pdb is not None
    for child in (sts, svc, pdb):
        meta = child["metadata"]
        assert meta["name"] == "ep-test"
        assert meta["labels"][api.LABEL_ENDPOINT] == "ep-test"
        (owner,) = meta["ownerReferences"]
        assert owner == {
            "apiVersion": "kvpin.dev/v1alpha1",
            "kind": "CachedEndpoint",
            "name": "ep-test",
            "uid": "uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }


def test_statefulset_is_parallel_and_rolls_one_pod_at_a_time() -> None:
    sts, svc, _ = render(replicas=3)
    s = sts["spec"]
    assert s["replicas"] == 3
    assert s["podManagementPolicy"] == "Parallel"
    assert s["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}
    assert s["serviceName"] == svc["metadata"]["name"]
    assert s["selector"]["matchLabels"] == {api.LABEL_ENDPOINT: "ep-test"}
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == s["selector"]["matchLabels"]


def test_gpu_pods_are_pinned_tolerated_limited_and_annotated() -> None:
    sts, _, _ = render(**gpu_endpoint())
    template = sts["spec"]["template"]
    pod = template["spec"]
    assert "nodeName" not in pod
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100-SXM4-80GB"]},
    ]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert template["metadata"]["annotations"][api.ANNOTATION_VRAM] == "40Gi"
    assert template["metadata"]["annotations"][api.ANNOTATION_VRAM_BYTES] == str(40 * 2**30)
    assert template["metadata"]["labels"][api.LABEL_ENDPOINT] == "ep-test"
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert container["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]


def test_pods_without_gpus_are_not_pinned_to_gpu_nodes() -> None:
    sts, _, _ = render()
    pod = sts["spec"]["template"]["spec"]
    assert "affinity" not in pod
    assert pod["tolerations"] == []
    assert "nvidia.com/gpu" not in pod["containers"][0]["resources"].get("limits", {})


def test_pod_overrides_reach_the_pod() -> None:
    sts, _, _ = render(
        **gpu_endpoint(
            pod={
                "env": [{"name": "HF_HOME", "value": "/models"}],
                "resources": {"requests": {"cpu": "4"}, "limits": {"memory": "64Gi"}},
                "volumes": [{"name": "models", "emptyDir": {}}],
                "volumeMounts": [{"name": "models", "mountPath": "/models"}],
                "serviceAccountName": "engine",
                "imagePullSecrets": [{"name": "regcred"}],
            },
            gpu={
                "count": 1,
                "nodeSelector": {"pool": "a100"},
                "tolerations": [{"key": "x", "operator": "Exists"}],
            },
        )
    )
    pod = sts["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert {"name": "HF_HOME", "value": "/models"} in container["env"]
    assert container["resources"] == {
        "requests": {"cpu": "4", "memory": "64Gi"},  # as Kubernetes defaults it: the limit
        "limits": {"memory": "64Gi", "nvidia.com/gpu": 1},
    }
    assert container["volumeMounts"] == [{"name": "models", "mountPath": "/models"}]
    assert pod["volumes"] == [{"name": "models", "emptyDir": {}}]
    assert pod["serviceAccountName"] == "engine"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert {"key": "x", "operator": "Exists"} in pod["tolerations"]
    expressions = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]["matchExpressions"]
    assert {"key": "pool", "operator": "In", "values": ["a100"]} in expressions


def test_pdb_only_from_two_replicas() -> None:
    assert render(replicas=1)[2] is None
    _, _, pdb = render(replicas=2)
    assert pdb is not None
    assert pdb["spec"] == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": {api.LABEL_ENDPOINT: "ep-test"}},
    }


def test_rendering_is_the_same_in_every_process() -> None:
    """An operator restart must not roll every pool: the children rendered by another process
    (another hash seed: set and dict orders differ) are byte for byte the same."""
    code = (
        "import json; from tests.unit.operator.test_desired import render, gpu_endpoint;"
        "print(json.dumps(render(**gpu_endpoint())))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2", "3")
    }  # fmt: skip
    assert len(outputs) == 1
    assert json.loads(outputs.pop()) == json.loads(json.dumps(render(**gpu_endpoint())))


def test_a_spec_change_changes_the_pod_template() -> None:
    before, _, _ = render(**gpu_endpoint())
    after, _, _ = render(**gpu_endpoint(vramReservation="60Gi"))
    assert before["spec"]["template"] != after["spec"]["template"]
    scaled, _, _ = render(**gpu_endpoint(replicas=5))
    assert scaled["spec"]["template"] == before["spec"]["template"]


def test_gpu_pods_need_no_feature_discovery_label_whatever_the_resource() -> None:
    fields = gpu_endpoint()
    fields["gpu"] = {"count": 1, "resourceName": "amd.com/gpu"}
    sts, _, _ = render(**fields)
    pod = sts["spec"]["template"]["spec"]
    assert "affinity" not in pod  # the amd.com/gpu limit is what pins it
    assert pod["containers"][0]["resources"]["limits"] == {"amd.com/gpu": 1}


def test_engine_pods_are_burstable_and_probes_tolerate_a_busy_engine() -> None:
    sts, _, _ = render(**gpu_endpoint())
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["requests"] == {"cpu": "2", "memory": "16Gi"}
    assert container["readinessProbe"]["timeoutSeconds"] == 5
    assert container["livenessProbe"]["timeoutSeconds"] == 10
    small = gpu_endpoint(pod={"resources": {"requests": {"cpu": "4"}, "limits": {"memory": "8Gi"}}})
    sts, _, _ = render(**small)
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["requests"] == {"cpu": "4", "memory": "8Gi"}  # not above limit


def test_a_pod_leaves_the_ring_before_it_stops_and_finishes_its_generations() -> None:
    template = render()[0]["spec"]["template"]["spec"]
    engine = template["containers"][0]
    assert engine["lifecycle"] == {"preStop": {"sleep": {"seconds": 10}}}
    assert template["terminationGracePeriodSeconds"] == 10 + 180
    template = render(drain={"leaveRingSeconds": 0, "gracePeriodSeconds": 30})[0]["spec"][
        "template"
    ]["spec"]
    assert "lifecycle" not in template["containers"][0]
    assert template["terminationGracePeriodSeconds"] == 30


def test_day_two_pod_settings_pass_through_and_gpu_affinity_is_kept() -> None:
    affinity = {
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}},
    }  # fmt: skip
    pod = {
        "affinity": affinity, "priorityClassName": "inference", "runtimeClassName": "nvidia",
        "securityContext": {"fsGroup": 1000}, "envFrom": [{"secretRef": {"name": "hf"}}],
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone"}],
        "initContainers": [{"name": "pull", "image": "puller"}],
        "sidecars": [{"name": "logs", "image": "shipper"}], "shmSize": "16Gi",
    }  # fmt: skip
    template = render(**gpu_endpoint(pod=pod))[0]["spec"]["template"]["spec"]
    terms = template["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert len(terms) == 2  # the user's alternatives stay alternatives, each pinned to the GPU
    assert all(t["matchExpressions"][-1]["key"] == desired.GPU_PRODUCT_LABEL for t in terms)
    assert "podAntiAffinity" in template["affinity"]
    assert (template["priorityClassName"], template["runtimeClassName"]) == ("inference", "nvidia")
    assert template["securityContext"] == {"fsGroup": 1000}
    assert template["topologySpreadConstraints"][0]["topologyKey"] == "zone"
    assert [c["name"] for c in template["initContainers"]] == ["pull"]
    engine, sidecar = template["containers"]
    assert sidecar["name"] == "logs" and engine["envFrom"] == [{"secretRef": {"name": "hf"}}]
    # two GPUs: tensor parallelism gets a memory-backed /dev/shm
    assert {"name": "kvpin-shm", "mountPath": "/dev/shm"} in engine["volumeMounts"]
    shm = next(v for v in template["volumes"] if v["name"] == "kvpin-shm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
    one_gpu = render(**gpu_endpoint(gpu={"count": 1, "product": "NVIDIA-A100-SXM4-80GB"}))
    assert "volumes" not in one_gpu[0]["spec"]["template"]["spec"]  # one GPU: none needed


REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def test_the_whole_statefulset_and_service_of_a_tensor_parallel_endpoint() -> None:
    """Every field, written out: what `kubectl get -o yaml` shows for a 2-GPU vLLM pool."""
    sts, svc, pdb = render(**gpu_endpoint(
        endpointId="support", replicas=3, drain={"leaveRingSeconds": 5, "gracePeriodSeconds": 60},
        pod={"env": [{"name": "HF_HOME", "value": "/cache"}], "labels": {"team": "a"},
             "annotations": {"note": "x"}, "serviceAccountName": "engine",
             "imagePullSecrets": [{"name": "hub"}], "priorityClassName": "gpu-high",
             "runtimeClassName": "nvidia", "securityContext": {"runAsNonRoot": True},
             "resources": {"limits": {"memory": "64Gi"}}},
    ))  # fmt: skip
    labels = {"kvpin.dev/endpoint": "ep-test", "app.kubernetes.io/name": "kvpin-engine",
              "app.kubernetes.io/managed-by": "kvpin-operator"}  # fmt: skip
    meta = {"name": "ep-test", "namespace": "default", "labels": labels, "ownerReferences": [
        {"apiVersion": "kvpin.dev/v1alpha1", "kind": "CachedEndpoint", "name": "ep-test",
         "uid": "uid-1", "controller": True, "blockOwnerDeletion": True}]}  # fmt: skip
    probe = {"httpGet": {"path": "/health", "port": "http"}}
    assert sts == {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta,
        "spec": {
            "replicas": 3, "serviceName": "ep-test", "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete",
                                                     "whenScaled": "Delete"},
            "selector": {"matchLabels": {"kvpin.dev/endpoint": "ep-test"}},
            "template": {
                "metadata": {
                    "labels": {"team": "a", **labels},
                    "annotations": {"note": "x", "kvpin.dev/vram-reservation": "40Gi",
                                    "kvpin.dev/vram-reservation-bytes": str(40 * 2**30),
                                    "kvpin.dev/endpoint-id": "support"},
                },
                "spec": {
                    "containers": [{
                        "name": "engine", "image": "vllm/vllm-openai:v0.11.0",
                        "command": ["vllm", "serve"],
                        "args": ["sim-8b", "--host", "0.0.0.0", "--port", "8000",
                                 "--served-model-name", "support", "sim-8b",
                                 "--tensor-parallel-size", "2", "--enable-prefix-caching",
                                 "--enable-prompt-tokens-details", "--kv-cache-memory-bytes",
                                 str(20 * 2**30)],
                        "ports": [{"name": "http", "containerPort": 8000, "protocol": "TCP"}],
                        "env": [{"name": "KVPIN_ENDPOINT_ID", "value": "support"},
                                {"name": "KVPIN_MODEL", "value": "sim-8b"},
                                {"name": "KVPIN_VRAM_RESERVATION_BYTES",
                                 "value": str(40 * 2**30)},
                                {"name": "HF_HOME", "value": "/cache"}],
                        "resources": {"limits": {"memory": "64Gi", "nvidia.com/gpu": 2},
                                      "requests": {"cpu": "2", "memory": "64Gi"}},
                        "startupProbe": {**probe, "periodSeconds": 10, "failureThreshold": 180},
                        "readinessProbe": {**probe, "periodSeconds": 5, "failureThreshold": 2,
                                           "timeoutSeconds": 5},
                        "livenessProbe": {**probe, "periodSeconds": 15, "failureThreshold": 4,
                                          "timeoutSeconds": 10},
                        "lifecycle": {"preStop": {"sleep": {"seconds": 5}}},
                        "volumeMounts": [{"name": "kvpin-shm", "mountPath": "/dev/shm"}],
                    }],
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                     "effect": "NoSchedule"}],
                    "terminationGracePeriodSeconds": 65,
                    "enableServiceLinks": False,
                    "affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                               "values": ["NVIDIA-A100-SXM4-80GB"]}]}]}}},
                    "volumes": [{"name": "kvpin-shm",
                                 "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}],
                    "priorityClassName": "gpu-high",
                    "runtimeClassName": "nvidia",
                    "securityContext": {"runAsNonRoot": True},
                    "serviceAccountName": "engine",
                    "imagePullSecrets": [{"name": "hub"}],
                },
            },
        },
    }  # fmt: skip
    assert svc == {
        "apiVersion": "v1", "kind": "Service", "metadata": meta,
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": False,
                 "selector": {"kvpin.dev/endpoint": "ep-test"},
                 "ports": [{"name": "http", "port": 8000, "targetPort": "http"}]},
    }  # fmt: skip
    assert pdb == {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta,
        "spec": {"maxUnavailable": 1,
                 "selector": {"matchLabels": {"kvpin.dev/endpoint": "ep-test"}}},
    }  # fmt: skip


def test_a_pool_without_gpus_or_drain_gets_small_requests_and_no_pinning() -> None:
    sts, _, pdb = render(replicas=1, drain={"leaveRingSeconds": 0})
    pod = sts["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"] == {"requests": {"cpu": "100m", "memory": "256Mi"}}
    assert "lifecycle" not in container and "volumeMounts" not in container
    assert "affinity" not in pod and "volumes" not in pod and pod["tolerations"] == []
    assert pod["terminationGracePeriodSeconds"] == 180
    assert pdb is None
    custom, _, _ = render(engine={"preset": "custom", "image": "my/engine:1"})
    assert "command" not in custom["spec"]["template"]["spec"]["containers"][0]  # its entrypoint


def test_probe_fields_are_merged_over_the_engines_and_a_handler_replaces_ours() -> None:
    slow_loader = {"failureThreshold": 360, "initialDelaySeconds": 30}
    script = {"exec": {"command": ["/ready.sh"]}, "timeoutSeconds": 20}
    sts, _, _ = render(**gpu_endpoint(pod={"startupProbe": slow_loader, "readinessProbe": script}))
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    assert container["startupProbe"] == {
        "httpGet": {"path": "/health", "port": "http"},
        "periodSeconds": 10, "failureThreshold": 360, "initialDelaySeconds": 30,
    }  # fmt: skip
    assert container["readinessProbe"] == {
        "exec": {"command": ["/ready.sh"]}, "periodSeconds": 5, "failureThreshold": 2,
        "timeoutSeconds": 20,
    }  # fmt: skip
    assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}


def test_each_pod_keeps_its_own_model_cache_claim() -> None:
    storage = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "50Gi"}}}
    claim = {"metadata": {"name": "models"}, "spec": storage}
    sts, _, _ = render(**gpu_endpoint(pod={
        "volumeClaimTemplates": [claim], "volumeMounts": [{"name": "models", "mountPath": "/m"}],
    }))  # fmt: skip
    assert sts["spec"]["volumeClaimTemplates"] == [claim]
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    assert {"name": "models", "mountPath": "/m"} in container["volumeMounts"]
    # claims go with the pod that is scaled away or the endpoint deleted: no orphaned disks
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Delete", "whenScaled": "Delete"
    }  # fmt: skip
    assert "volumeClaimTemplates" not in render(**gpu_endpoint())[0]["spec"]


def test_the_hub_token_comes_from_a_secret_and_user_env_follows() -> None:
    sts, _, _ = render(**gpu_endpoint(
        engine={"preset": "vllm", "hubTokenSecret": {"name": "hf"}},
        pod={"env": [{"name": "HF_HOME", "value": "/m"}]},
    ))  # fmt: skip
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    names = [e["name"] for e in container["env"]]
    assert names[-2:] == ["HF_TOKEN", "HF_HOME"]
    assert container["env"][-2]["valueFrom"] == {"secretKeyRef": {"name": "hf", "key": "token"}}
    assert "value" not in container["env"][-2]  # never the token itself in the StatefulSet
    secret = {"name": "hf", "key": "hf_token"}
    sts, _, _ = render(**gpu_endpoint(engine={"preset": "vllm", "hubTokenSecret": secret}))
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    assert {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf", "key": "hf_token"}},
    } in container["env"]


def test_a_simulated_pod_is_told_its_own_name_by_the_downward_api() -> None:
    sts, _, _ = render(**gpu_endpoint(engine={"preset": "sim"}))
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in (
        container["env"]
    )
