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
