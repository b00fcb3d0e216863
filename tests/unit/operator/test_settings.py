"""The operator's kopf settings and command line."""

import kopf
import pytest

from kvpin import cli
from kvpin.operator import settings


def test_one_standalone_replica_with_no_peering_to_set_up() -> None:
    # kopf peering needs its own CRDs and RBAC, which the chart does not ship: no flag offers it
    kopf_settings = kopf.OperatorSettings()
    settings.apply_kopf_settings(kopf_settings, settings.OperatorConfig())
    assert kopf_settings.peering.standalone is True
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["operator", "--peering", "kvpin"])
    args = cli.build_parser().parse_args(["operator", "-n", "team-*", "-n", "prod"])
    assert args.namespace == ["team-*", "prod"]


def test_children_and_pods_are_filtered_by_the_api_server() -> None:
    from kopf._cogs.structs import references  # kopf's own resource type, to ask its settings

    kopf_settings = kopf.OperatorSettings()
    settings.apply_kopf_settings(kopf_settings, settings.OperatorConfig())
    selectors = kopf_settings.watching.label_selectors
    for group, version, plural in (settings.POD_RESOURCE, *settings.CHILD_RESOURCES):
        resource = references.Resource(group=group, version=version, plural=plural)
        assert list(selectors.collect(resource)) == [
            "kvpin.dev/endpoint,app.kubernetes.io/managed-by=kvpin-operator"
        ]
    endpoints = references.Resource(group="kvpin.dev", version="v1alpha1", plural="cachedendpoints")
    assert list(selectors.collect(endpoints)) == []  # every CachedEndpoint is watched


def test_every_child_and_pod_the_operator_makes_matches_the_selector() -> None:
    from kvpin.operator import desired, spec
    from tests import factories

    labels = desired.build_labels(spec.parse(factories.endpoint()))
    for requirement in settings.CHILD_SELECTOR.split(","):
        key, _, value = requirement.partition("=")
        assert key in labels and (not value or labels[key] == value)
