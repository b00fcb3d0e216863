"""Headers each way (router.headers)."""

from multidict import CIMultiDict

from kvpin.router import headers


def test_connection_listed_headers_are_dropped_from_plain_and_multi_dicts() -> None:
    plain = {"Connection": "X-Hop", "X-Hop": "1", "X-Kept": "2"}
    multi = CIMultiDict([("connection", "x-hop"), ("X-Hop", "1"), ("X-Kept", "2")])
    for given in (plain, multi):
        out = headers.upstream(given, client=None, scheme="https", host=None, strip_auth=False)
        assert "X-Hop" not in out and out["X-Kept"] == "2"
        assert out["X-Forwarded-Proto"] == "https"


def test_response_headers_lose_hop_by_hop_and_length() -> None:
    given = CIMultiDict([("Content-Length", "5"), ("Keep-Alive", "1"), ("X-Request-Id", "r")])
    assert headers.downstream(given) == [("X-Request-Id", "r")]


def test_the_upstream_request_says_who_asked_and_asks_for_plain_bytes() -> None:
    from multidict import CIMultiDict

    given = CIMultiDict([
        ("Authorization", "Bearer router-token"), ("X-Forwarded-For", "203.0.113.7"),
        ("x-forwarded-for", "10.0.0.2"), ("X-Forwarded-Proto", "https"),
        ("X-Forwarded-Host", "api.example.com"), ("Host", "router:8080"),
        ("Accept-Encoding", "gzip"), ("Content-Encoding", "gzip"), ("Expect", "100-continue"),
        ("Content-Length", "12"), ("Connection", "keep-alive, X-Debug"), ("X-Debug", "1"),
        ("X-Session-ID", "s-1"),
    ])  # fmt: skip
    out = headers.upstream(given, client="10.0.0.9", scheme="http", host="router:8080",
                           strip_auth=True)  # fmt: skip
    assert out == {
        "X-Session-ID": "s-1",
        "X-Forwarded-For": "203.0.113.7, 10.0.0.2, 10.0.0.9",
        "X-Forwarded-Proto": "https",  # what the first proxy saw, not this hop
        "X-Forwarded-Host": "api.example.com",
        "Accept-Encoding": "identity",
    }
    kept = headers.upstream({"authorization": "Bearer engine-key"}, client=None, scheme="http",
                            host=None, strip_auth=False)  # fmt: skip
    assert kept == {"authorization": "Bearer engine-key", "X-Forwarded-Proto": "http",
                    "Accept-Encoding": "identity"}  # fmt: skip
    first = headers.upstream({}, client="10.0.0.9", scheme="https", host="r", strip_auth=True)
    assert first == {"X-Forwarded-For": "10.0.0.9", "X-Forwarded-Proto": "https",
                     "X-Forwarded-Host": "r", "Accept-Encoding": "identity"}  # fmt: skip
