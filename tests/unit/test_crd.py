"""The CRD's shape and the examples against its schema (the structural part; the CEL rules are
exercised by a real API server in tests/controlplane)."""

import jsonschema
import pytest
import yaml

from kvpin import api
from kvpin.operator import spec
from kvpin.router.config import RoutingConfig
from tests import crd


def test_crd_names_match_the_contract() -> None:
    doc = crd.load()
    assert doc["metadata"]["name"] == f"{api.PLURAL}.{api.GROUP}"
    assert doc["spec"]["group"] == api.GROUP
    assert doc["spec"]["scope"] == "Namespaced"
    names = doc["spec"]["names"]
    assert (names["kind"], names["plural"], names["shortNames"]) == (api.KIND, api.PLURAL, ["cep"])
    (version,) = doc["spec"]["versions"]
    assert version["name"] == api.VERSION
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    assert "status" in version["subresources"]


def test_schema_defaults_agree_with_the_operator() -> None:
    props = crd.json_schema()["properties"]["spec"]["properties"]
    assert props["replicas"]["default"] == 1
    assert props["engine"]["properties"]["preset"]["enum"] == list(spec.PRESETS)
    assert props["engine"]["properties"]["port"]["default"] == spec.DEFAULT_PORT
    assert props["gpu"]["properties"]["resourceName"]["default"] == spec.DEFAULT_GPU_RESOURCE
    routing = props["routing"]["properties"]
    assert routing["key"]["enum"] == list(spec.KEY_MODES)
    assert routing["loadFactor"]["default"] == spec.DEFAULT_LOAD_FACTOR
    assert routing["virtualNodes"]["default"] == spec.DEFAULT_VIRTUAL_NODES
    assert routing["sessionHeader"]["default"] == spec.DEFAULT_SESSION_HEADER
    assert routing["prefixChars"]["default"] == RoutingConfig().prefix_chars


@pytest.mark.parametrize("path", crd.EXAMPLES, ids=lambda p: p.name)
def test_examples_are_valid(path) -> None:
    body = yaml.safe_load(path.read_text())
    jsonschema.validate(body, crd.json_schema())
    body["metadata"].setdefault("namespace", "default")
    spec.parse(body)  # and the operator accepts them


def test_every_preset_has_an_example() -> None:
    presets = {yaml.safe_load(p.read_text())["spec"]["engine"]["preset"] for p in crd.EXAMPLES}
    assert presets == set(spec.PRESETS)


@pytest.mark.parametrize(
    "override",
    [{"replicas": -1}, {"engine": {"preset": "tgi"}}, {"routing": {"loadFactor": 0.5}}],
)
def test_schema_rejects_structurally_wrong_specs(override) -> None:
    body = {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": "x"},
            "spec": {"model": "m", "vramReservation": "1Gi", **override}}  # fmt: skip
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(body, crd.json_schema())


def test_the_chart_ships_the_same_crd() -> None:
    chart_copy = crd.ROOT / "helm" / "kvpin" / "crds" / crd.CRD_PATH.name
    assert chart_copy.read_text() == crd.CRD_PATH.read_text()
