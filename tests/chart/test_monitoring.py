"""The chart's Grafana dashboard and Prometheus alerts: rendered by the real helm, the rules
checked by the real promtool, and every metric they name exported by the router or the
operator."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import prometheus_client
import pytest
import yaml

from kvpin.operator import metrics as operator_metrics
from kvpin.router.metrics import build_metrics
from tests import toolchain
from tests.chart.conftest import Render

FLAGS = ("monitoring.dashboard.enabled=true", "monitoring.rules.enabled=true")
_METRIC = re.compile(r"\bkvpin_[a-z_]+")


def exported() -> set[str]:
    """Every series name the router and the operator can export."""
    suffixes = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum")}
    names = set()
    for registry in (build_metrics().registry, prometheus_client.REGISTRY):
        for family in registry.collect():
            if family.name.startswith("kvpin_"):
                names |= {family.name + s for s in suffixes[family.type]}
    assert operator_metrics.CONDITION  # the operator's metrics are registered on import
    return names


def expressions(objects: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """The PromQL of the dashboard's panels, and the rules' groups."""
    (configmap,) = [o for o in objects if o["kind"] == "ConfigMap"]
    dashboard = json.loads(configmap["data"]["kvpin.json"])
    panels = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
    return panels, rule["spec"]["groups"]


def test_nothing_is_rendered_unless_asked(render: Render) -> None:
    kinds = {o["kind"] for o in render()}
    assert "PrometheusRule" not in kinds and "ConfigMap" not in kinds


def test_the_dashboard_and_rules_name_only_exported_metrics(render: Render) -> None:
    objects = render(*FLAGS)
    (configmap,) = [o for o in objects if o["kind"] == "ConfigMap"]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"  # the sidecar's label
    panels, groups = expressions(objects)
    named = {m for e in panels for m in _METRIC.findall(e)}
    named |= {m for g in groups for r in g["rules"] for m in _METRIC.findall(r["expr"])}
    assert named and named <= exported(), sorted(named - exported())
    alerts = {r["alert"] for g in groups for r in g["rules"]}
    assert {"KvpinHitRateLow", "KvpinEndpointNoReadyMember", "KvpinEndpointDegraded"} <= alerts


def test_the_alert_thresholds_come_from_the_values(render: Render) -> None:
    _, groups = expressions(render(*FLAGS, "monitoring.rules.hitRateBelow=1"))
    (hit,) = [r for g in groups for r in g["rules"] if r.get("alert") == "KvpinHitRateLow"]
    assert hit["expr"].rstrip().endswith("< 1")  # --set gives floats as strings


@pytest.fixture(scope="module")
def promtool() -> str:
    return str(toolchain.bindir() / "promtool")


def test_promtool_accepts_the_rules(render: Render, promtool: str, tmp_path) -> None:
    _, groups = expressions(render(*FLAGS))
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": groups}))
    out = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True,
                         text=True, check=False)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 6 rules found" in out.stdout


def test_promtool_refuses_a_broken_rule(promtool: str, tmp_path) -> None:
    # the check above can fail: promtool parses the PromQL
    rules = tmp_path / "rules.yaml"
    broken = {"alert": "Broken", "expr": "sum by (endpoint) (rate(kvpin_router_requests_total[5m])"}
    rules.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [broken]}]}))
    out = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True,
                         text=True, check=False)  # fmt: skip
    assert out.returncode != 0
