"""One CachedEndpoint and its namespace's others -> the children to apply, or the problem.

Pure: the decision half of a reconcile. `reconciling` fetches the inputs and applies the
result; tests call `build_plan` with plain dicts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from kvpin.operator import claims, desired, spec, status


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a reconcile should do."""

    endpoint: spec.EndpointSpec | None
    apply: tuple[dict[str, Any], ...] = ()
    delete: tuple[str, ...] = ()  # kinds of owned children that must go (the PDB below 2)
    problem: status.Problem | None = None


def build_plan(
    body: Mapping[str, Any], others: Iterable[Mapping[str, Any]], *, sim_image: str
) -> Plan:
    """Parse, check the endpoint id's claim, and render the children."""
    try:
        endpoint = spec.parse(body)
        service = desired.build_service(endpoint, body)
        statefulset = desired.build_statefulset(endpoint, body, sim_image=sim_image)
    except spec.SpecError as err:
        return Plan(None, problem=status.Problem(status.REASON_INVALID_SPEC, str(err)))
    rival = claims.find_rival(body, others)
    if rival:
        return Plan(
            endpoint,
            problem=status.Problem(
                status.REASON_ENDPOINT_ID_CONFLICT,
                f"endpoint id {endpoint.endpoint_id!r} is already claimed by CachedEndpoint "
                f"{rival}; change spec.endpointId",
            ),
        )
    # The StatefulSet last: a name conflict on the Service or the PDB stops the apply before
    # any GPU pod starts.
    pdb = desired.build_pdb(endpoint, body)
    if pdb is None:
        return Plan(endpoint, apply=(service, statefulset), delete=("PodDisruptionBudget",))
    return Plan(endpoint, apply=(service, pdb, statefulset))
