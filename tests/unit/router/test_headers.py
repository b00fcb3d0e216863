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
