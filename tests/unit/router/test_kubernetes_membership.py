"""The pure part of following CachedEndpoints (the watch itself runs in tests/controlplane)."""

from kvpin.router.membership.kubernetes import build_endpoints


def cep(name: str, namespace: str = "a", created: str = "2026-01-01T00:00:00Z", **status) -> dict:
    return {
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created},
        "spec": {"routing": {"loadFactor": 1.5}},
        "status": {
            "ring": {"members": [{"name": f"{name}-0", "address": "10.0.0.1:8000"}]},
            **status,
        },
    }


def test_endpoints_are_keyed_by_their_id() -> None:
    eps = build_endpoints([cep("ep-a"), cep("ep-b", endpointId="custom")])
    assert set(eps) == {"ep-a", "custom"}
    assert eps["ep-a"].routing.load_factor == 1.5
    assert [m.name for m in eps["custom"].members] == ["ep-b-0"]


def test_the_older_claim_wins_across_namespaces_and_deleted_objects_go() -> None:
    old = cep("ep-a", "a", "2026-01-01T00:00:00Z")
    new = cep("ep-a", "b", "2026-02-01T00:00:00Z")
    assert build_endpoints([new, old])["ep-a"].members[0].name == "ep-a-0"
    gone = cep("ep-c")
    gone["metadata"]["deletionTimestamp"] = "2026-03-01T00:00:00Z"
    assert "ep-c" not in build_endpoints([gone])


def test_an_unreadable_spec_is_skipped_not_fatal() -> None:
    bad = cep("ep-bad")
    bad["spec"]["routing"] = {"loadFactor": "fast"}
    assert set(build_endpoints([bad, cep("ep-ok")])) == {"ep-ok"}
