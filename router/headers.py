"""Which headers cross the router, each way (RFC 9110 section 7.6).

Pure. Hop-by-hop headers (the fixed list and every header named in `Connection`) stop at the
router. Upstream, the router adds `X-Forwarded-For`/`-Proto`/`-Host`, asks for an uncompressed
answer (`Accept-Encoding: identity`: the usage reader reads it and the client gets plain bytes,
never bytes labelled with an encoding they do not have), and drops what it answers itself
(`Expect`: aiohttp has already sent 100 Continue) or recomputes (`Host`, `Content-Length`; the
body arrives decoded, so `Content-Encoding` goes too). The router's own bearer token is not the
engine's business.
"""

from __future__ import annotations

from collections.abc import Mapping

HOP_BY_HOP = frozenset(
    ("connection", "proxy-connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
     "te", "trailer", "transfer-encoding", "upgrade")
)  # fmt: skip
NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length", "content-encoding", "accept-encoding",
                              "expect", "x-forwarded-for", "x-forwarded-proto",
                              "x-forwarded-host"}  # fmt: skip
NOT_RELAYED = HOP_BY_HOP | {"content-length", "content-encoding", "server", "date"}


def _named_in_connection(headers: Mapping[str, str]) -> set[str]:
    named: set[str] = set()
    for value in _all(headers, "connection"):
        named.update(token.strip().lower() for token in value.split(",") if token.strip())
    return named


def _all(headers: Mapping[str, str], name: str) -> list[str]:
    """Every value of header `name`, matched case-insensitively whatever the mapping."""
    getall = getattr(headers, "getall", None)  # a CIMultiDict: repeated headers included
    if getall is not None:
        return list(getall(name, []))
    return [v for k, v in headers.items() if k.lower() == name]


def upstream(
    headers: Mapping[str, str],
    *,
    client: str | None,
    scheme: str,
    host: str | None,
    strip_auth: bool,
) -> dict[str, str]:
    """The headers sent to the member for a client request with `headers`."""
    drop = NOT_FORWARDED | _named_in_connection(headers)
    if strip_auth:
        drop = drop | {"authorization"}
    out = {k: v for k, v in headers.items() if k.lower() not in drop}
    forwarded = ", ".join(_all(headers, "x-forwarded-for"))
    if client:
        forwarded = f"{forwarded}, {client}" if forwarded else client
    if forwarded:
        out["X-Forwarded-For"] = forwarded
    out["X-Forwarded-Proto"] = next(iter(_all(headers, "x-forwarded-proto")), scheme)
    if host:
        out["X-Forwarded-Host"] = next(iter(_all(headers, "x-forwarded-host")), host)
    out["Accept-Encoding"] = "identity"
    return out


def downstream(headers: Mapping[str, str]) -> list[tuple[str, str]]:
    """The member's response headers that reach the client."""
    drop = NOT_RELAYED | _named_in_connection(headers)
    return [(k, v) for k, v in headers.items() if k.lower() not in drop]
