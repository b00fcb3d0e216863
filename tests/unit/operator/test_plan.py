from kvpin import api
from kvpin.operator import plan, status
from tests import factories


def build(body, others=()):
    return plan.build_plan(body, others, sim_image="kvpin:test")


def test_valid_endpoint_applies_statefulset_service_and_pdb() -> None:
    todo = build(factories.endpoint(replicas=2))
    # the StatefulSet last: a conflict on another child's name stops before any pod starts
    assert [m["kind"] for m in todo.apply] == ["Service", "PodDisruptionBudget", "StatefulSet"]
    assert todo.delete == ()
    assert todo.problem is None


def test_single_replica_deletes_the_pdb() -> None:
    todo = build(factories.endpoint(replicas=1))
    assert [m["kind"] for m in todo.apply] == ["Service", "StatefulSet"]
    assert todo.delete == ("PodDisruptionBudget",)


def test_invalid_spec_applies_nothing() -> None:
    todo = build(factories.endpoint(replicas=-3))
    assert todo.apply == ()
    assert todo.problem is not None
    assert todo.problem == status.Problem(
        status.REASON_INVALID_SPEC, "spec.replicas must be at least 0"
    )
    assert todo.endpoint is None and todo.delete == ()


def test_the_older_claim_on_an_endpoint_id_wins() -> None:
    older = factories.endpoint("ep-a", uid="a", created="2026-01-01T00:00:00Z", endpointId="ep-x")
    newer = factories.endpoint("ep-b", uid="b", created="2026-01-02T00:00:00Z", endpointId="ep-x")
    assert build(older, [older, newer]).problem is None
    loser = build(newer, [older, newer])
    assert loser.apply == ()
    assert loser.problem is not None
    assert loser.problem == status.Problem(
        status.REASON_ENDPOINT_ID_CONFLICT,
        "endpoint id 'ep-x' is already claimed by CachedEndpoint default/ep-a; change "
        "spec.endpointId",
    )
    assert loser.endpoint is not None and loser.endpoint.endpoint_id == "ep-x"


def test_claims_span_namespaces_as_the_router_serves_ids_from_all_it_watches() -> None:
    older = factories.endpoint("ep", namespace="team-a", uid="a", created="2026-01-01T00:00:00Z")
    newer = factories.endpoint("ep", namespace="team-b", uid="b", created="2026-01-02T00:00:00Z")
    assert build(older, [older, newer]).problem is None  # same name, not the same object
    loser = build(newer, [older, newer]).problem
    assert loser is not None and "claimed by CachedEndpoint team-a/ep;" in loser.message
    # created in the same second: the router's tie-break (namespace, then name) decides alike
    twin = factories.endpoint("ep", namespace="team-0", uid="c", created="2026-01-01T00:00:00Z")
    assert build(older, [older, twin]).problem is not None
    assert sorted([older, twin], key=api.claim_rank)[0] is twin


def test_an_endpoint_id_defaults_to_the_name_when_claims_are_compared() -> None:
    named = factories.endpoint("ep-x", uid="a", created="2026-01-01T00:00:00Z")
    explicit = factories.endpoint(
        "other", uid="b", created="2026-01-02T00:00:00Z", endpointId="ep-x"
    )
    assert build(explicit, [named, explicit]).problem is not None
    deleting = factories.endpoint("ep-x", uid="a", created="2026-01-01T00:00:00Z")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-03T00:00:00Z"
    assert build(explicit, [deleting, explicit]).problem is None
