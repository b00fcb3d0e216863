import pytest

from kvpin import api
from kvpin.router import config
from tests import crd


def test_the_smallest_static_config() -> None:
    eps = config.parse_static(
        {"endpoints": {"ep-support": {"members": ["http://10.0.0.5:8000", "http://10.0.0.6:8000"]}}}
    )
    ep = eps["ep-support"]
    assert ep.members == (
        api.RingMember("http://10.0.0.5:8000", "10.0.0.5:8000"),
        api.RingMember("http://10.0.0.6:8000", "10.0.0.6:8000"),
    )
    assert ep.routing == config.RoutingConfig()


def test_named_members_and_routing() -> None:
    routing = {"key": "session", "loadFactor": 2, "sessionHeader": "X-Conv", "prefixChars": 512}
    members = [{"name": "pod-0", "url": "http://[::1]:9000"}]
    eps = config.parse_static({"endpoints": {"ep": {"members": members, "routing": routing}}})
    assert eps["ep"].members == (api.RingMember("pod-0", "[::1]:9000"),)
    assert eps["ep"].routing == config.RoutingConfig("session", 2.0, 160, "X-Conv", 512)


M = ["http://10.0.0.5:8000"]
NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({}, "`endpoints:`"),
        ({"endpoints": {"ep": {}}}, "needs `members:`"),
        ({"endpoints": {"ep": {"members": ["ftp://x"]}}}, "http://host:port"),
        ({"endpoints": {"ep": {"members": ["http://x:1/path"]}}}, "http://host:port"),
        ({"endpoints": {"ep": {"members": ["http://x:1", "http://x:1"]}}}, "unique"),
        ({"endpoints": {"ep": {"members": M, "routing": {"key": "random"}}}}, "routing.key"),
        ({"endpoints": {"ep": {"members": M, "routing": {"loadFactor": 0.9}}}}, "at least 1"),
        ({"endpoints": {"ep": {"members": M, "routing": {"loadFactor": NAN}}}}, "finite"),
        ({"endpoints": {"ep": {"members": M, "routing": {"loadFactor": INF}}}}, "finite"),
        ({"endpoints": {"ep": {"members": M, "routing": {"cacheSalt": "x"}}}}, "cacheSalt"),
        ({"endpoints": {"ep": {"members": M, "routing": {"prefixChars": 10**6}}}}, "at most"),
        ({"endpoints": {"ep": {"members": M, "routing": {"freshBelow": 1}}}}, "freshBelow"),
        ({"endpoints": {"ep": {"members": M, "routing": {"freshBelow": -0.1}}}}, "freshBelow"),
        ({"endpoints": {"ep": {"members": M, "routing": {"freshBelow": NAN}}}}, "freshBelow"),
        ({"endpoints": {"ep": {"members": M, "routing": {"freshBelow": True}}}}, "freshBelow"),
        ({"endpoints": {"ep": {"members": M, "routing": {"cacheTokens": 0}}}}, "cacheTokens"),
        ({"endpoints": {"ep": {"members": M, "routing": {"cacheTokens": INF}}}}, "cacheTokens"),
        ({"endpoints": {"ep": {"members": M, "routing": {"cacheTokens": "1Gi"}}}}, "cacheTokens"),
        ({"endpoints": {"ep": {"members": []}}}, "is empty"),
        ({"endpoints": {"ep": {"members": ["http://[::1"]}}}, "not a URL"),
        (
            {
                "endpoints": {
                    "ep": {
                        "members": [
                            {"name": "a", "url": "http://x:1"},
                            {"name": "b", "url": "http://x:1"},
                        ]
                    }
                }
            },
            "URLs must be unique",
        ),
        ({"endpoints": {"bad id!": {"members": M}}}, "endpoint ids"),
    ],
)
def test_bad_configs_say_what_is_wrong(doc, message) -> None:
    with pytest.raises(config.ConfigError, match=message.replace("(", r"\(")):
        config.parse_static(doc)


def test_endpoint_from_a_cached_endpoint() -> None:
    body = {
        "metadata": {"name": "ep-support", "namespace": "prod"},
        "spec": {"endpointId": "ep-x", "routing": {"key": "endpoint", "loadFactor": 1.5}},
        "status": {"endpointId": "ep-x", "ring": {"version": "v", "members": [
            {"name": "ep-support-1", "address": "10.1.0.2:8000"},
            {"name": "ep-support-0", "address": "10.1.0.1:8000"}]}},
    }  # fmt: skip
    ep = config.endpoint_from_resource(body)
    assert ep.id == "ep-x"
    assert [m.name for m in ep.members] == ["ep-support-0", "ep-support-1"]
    assert ep.routing.key == "endpoint"
    assert config.endpoint_from_resource({"metadata": {"name": "n"}}).members == ()


def test_placement_settings_reach_the_cost_rule() -> None:
    routing = config.parse_routing({"freshBelow": 0, "cacheTokens": 500_000}, "here")
    assert routing.costs().fresh_below == 0.0 and routing.cache_tokens == 500_000.0
    defaults = config.parse_routing({}, "here")
    assert defaults.costs().fresh_below == 0.3 and defaults.cache_tokens is None


def test_defaults_match_the_crd() -> None:
    """A static config (`kvpin router --config`) and a CachedEndpoint the API server defaulted
    route alike: every routing default here is the CRD's, so a default changed in one place
    and not the other fails here."""
    fields = crd.spec_schema()["properties"]["routing"]["properties"]
    defaulted = {name: f["default"] for name, f in fields.items() if "default" in f}
    assert "moveMargin" in defaulted and "freshBelow" in defaulted
    assert config.parse_routing(defaulted, "crd") == config.parse_routing({}, "static")
