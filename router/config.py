"""Router configuration: endpoints and their routing (from a file or CachedEndpoints), and the
settings of the proxy process.

Pure. Built and validated here, at the edge, then passed down frozen; a membership change makes
a new snapshot rather than editing one. Errors say which field is wrong.
"""

from __future__ import annotations

import dataclasses
import math
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from kvpin import api
from kvpin.router import auth, bodies, keys, placement
from kvpin.router.outliers import OutlierSettings
from kvpin.router.warmup import WarmupConfig, head_of

CACHE_SALTS = ("none", "tenant")
INFERENCE_ROUTES = (
    "/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses",
    "/v1/rerank", "/v1/score", "/v1/classify",
)  # fmt: skip
_DNS_LABEL = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class ConfigError(ValueError):
    """The configuration cannot be used; the message names the field."""


@dataclasses.dataclass(frozen=True)
class RoutingConfig:
    """How one endpoint's requests are keyed onto its ring."""

    key: str = "prefix"
    """prefix, session or endpoint (see kvpin.router.keys)."""
    load_factor: float = 2.0
    """A hard cap against skew: a member is passed over while its in-flight requests exceed
    this x the pool's mean. Everyday placement is by cost (router.placement)."""
    virtual_nodes: int = 160
    """Points per member on the ring."""
    session_header: str = "X-Session-ID"
    """Header carrying the session id in `session` mode."""
    prefix_chars: int = 2048
    """Characters of the stable head (system, tools, first turns) that make the prefix key."""
    cache_salt: str = "none"
    """none, or tenant: each tenant's requests get their own `cache_salt` (see router.auth)."""
    prefill_tokens_per_s: float = 10_000.0
    """A member's prefill rate until the router has measured it."""
    move_margin: float = placement.DEFAULT_MOVE_MARGIN
    """A request leaves the member holding its prefix only for one whose estimated TTFT, plus
    the delay its prefill adds to the requests waiting there, is lower by this multiple of the
    prefill the move recomputes (router.placement)."""
    cache_tokens: float | None = None
    """Tokens one member's KV cache holds, to guess what it has evicted (router.holdings);
    None: what the engine's metrics say. Set it where an engine keeps more than its GPU cache
    (CPU or disk offload)."""
    fresh_below: float = placement.CostSettings.fresh_below
    """A request whose best-held prefix is at most this fraction of its prompt is placed as a
    new conversation (router.placement)."""
    keep_homes: bool = True
    """On a membership change a conversation stays with the member holding its prefix; false:
    every key follows the new ring (what the placement index knew is dropped)."""
    warmup: WarmupConfig = dataclasses.field(default_factory=WarmupConfig)
    """How a member that joins is warmed before it takes new keys (router.warmup)."""

    def costs(self) -> placement.CostSettings:
        return placement.CostSettings(
            self.prefill_tokens_per_s, self.move_margin, fresh_below=self.fresh_below
        )


@dataclasses.dataclass(frozen=True)
class EndpointConfig:
    """One endpoint: its id (what clients send as `model`), members and routing."""

    id: str
    members: tuple[api.RingMember, ...]
    routing: RoutingConfig = RoutingConfig()


@dataclasses.dataclass(frozen=True)
class Timeouts:
    """Upstream timeouts, in seconds."""

    connect: float = 5.0
    """To open a connection to a member."""
    first_byte: float = 300.0
    """From sending the request to the first response byte (a long prefill takes a while)."""
    idle: float = 60.0
    """Between two chunks of a response once it has started."""
    client_body: float = 60.0
    """To read a client's whole request body."""
    client_write: float = 60.0
    """For a client to take one chunk of the response (a client that stops reading)."""
    error_body: float = 5.0
    """To read a member's error answer before trying another member."""


@dataclasses.dataclass(frozen=True)
class ParseSettings:
    """Body limits, and when a body leaves the event loop to be parsed (router.parsing)."""

    workers: int = 1
    """Worker processes for large bodies; 0 parses every body on the event loop."""
    inline_bytes: int = 2 * 2**20
    """Bodies up to this size may be parsed inline..."""
    inline_objects: int = 500
    """...if they hold at most this many JSON objects (an upper bound: `{` bytes)."""
    limits: bodies.Limits = bodies.Limits()


@dataclasses.dataclass(frozen=True)
class ProxySettings:
    """Settings of one router process."""

    timeouts: Timeouts = Timeouts()
    max_attempts: int = 3
    """Members tried for one request (connect errors and 5xx before any byte); 1: no retry."""
    outliers: OutlierSettings = OutlierSettings()
    """When a failing member is passed over, and for how long."""
    max_body_bytes: int = 32 * 2**20
    """Larger request bodies are refused with 413."""
    max_error_body_bytes: int = 64 * 2**10
    """Of a member's error answer, kept to relay if every member fails; the rest is dropped."""
    parse: ParseSettings = ParseSettings()
    routes: tuple[str, ...] = INFERENCE_ROUTES
    """POST paths forwarded to members; any other path is answered 404 by the router."""
    break_header: bool = False
    """Name the broken prefix zone in an `X-Kvpin-Prefix-Break` response header."""
    conversations: int = 100_000
    """Conversations whose last turn is remembered, to notice prefix breaks."""
    holdings_bytes: int = 32 * 2**20
    """Memory per endpoint for the guesses of what members hold (router.holdings)."""
    engine_metrics_interval: float = 0.25
    """Seconds between reads of each member's /metrics (0: never; local estimates only)."""
    tokens: auth.Tokens = auth.Tokens()
    """Bearer tokens accepted and their tenants; empty: no authentication."""
    metrics_auth: bool = False
    """Ask for a bearer token on /metrics too (it names endpoints and members)."""
    replica: str = ""
    """This router replica's own URL as the others reach it (router.replicas); empty: alone."""
    replicas: tuple[str, ...] = ()
    """Every replica's URL (this one's too): each endpoint is decided by one of them."""
    replicas_dns: str = ""
    """A DNS name listing every replica's address (a headless Service), followed instead."""


def parse_routing(raw: Any, where: str) -> RoutingConfig:
    """`routing:` (static file) or `spec.routing` (CachedEndpoint) -> RoutingConfig."""
    if raw is None:
        return RoutingConfig()
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: routing must be a mapping")
    defaults = RoutingConfig()
    key = raw.get("key", defaults.key)
    if key not in keys.MODES:
        raise ConfigError(f"{where}: routing.key must be one of {', '.join(keys.MODES)}")
    load_factor = raw.get("loadFactor", defaults.load_factor)
    if isinstance(load_factor, bool) or not isinstance(load_factor, int | float):
        raise ConfigError(f"{where}: routing.loadFactor must be a number")
    if not math.isfinite(load_factor) or load_factor < 1:
        raise ConfigError(f"{where}: routing.loadFactor must be a finite number, at least 1")
    virtual_nodes = raw.get("virtualNodes", defaults.virtual_nodes)
    prefix_chars = raw.get("prefixChars", defaults.prefix_chars)
    for name, value in (("virtualNodes", virtual_nodes), ("prefixChars", prefix_chars)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{where}: routing.{name} must be a positive integer")
    if prefix_chars > keys.HEAD_CHARS:
        raise ConfigError(f"{where}: routing.prefixChars must be at most {keys.HEAD_CHARS}")
    header = raw.get("sessionHeader", defaults.session_header)
    if not isinstance(header, str) or not header:
        raise ConfigError(f"{where}: routing.sessionHeader must be a header name")
    salt = raw.get("cacheSalt", defaults.cache_salt)
    if salt not in CACHE_SALTS:
        raise ConfigError(f"{where}: routing.cacheSalt must be one of {', '.join(CACHE_SALTS)}")
    rate = raw.get("prefillTokensPerSecond", defaults.prefill_tokens_per_s)
    margin = raw.get("moveMargin", defaults.move_margin)
    for name, value in (("prefillTokensPerSecond", rate), ("moveMargin", margin)):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: routing.{name} must be a number")
        if not math.isfinite(value) or value <= 0:
            raise ConfigError(f"{where}: routing.{name} must be a positive finite number")
    cache_tokens = raw.get("cacheTokens", defaults.cache_tokens)
    if cache_tokens is not None and (
        isinstance(cache_tokens, bool) or not isinstance(cache_tokens, int | float)
        or not math.isfinite(cache_tokens) or cache_tokens <= 0
    ):  # fmt: skip
        raise ConfigError(f"{where}: routing.cacheTokens must be a positive number")
    fresh = raw.get("freshBelow", defaults.fresh_below)
    if isinstance(fresh, bool) or not isinstance(fresh, int | float) or not 0 <= fresh < 1:
        raise ConfigError(f"{where}: routing.freshBelow must be a number from 0 to below 1")
    keep_homes = raw.get("keepHomes", defaults.keep_homes)
    if not isinstance(keep_homes, bool):
        raise ConfigError(f"{where}: routing.keepHomes must be true or false")
    return RoutingConfig(key, float(load_factor), virtual_nodes, header, prefix_chars, salt,
                         float(rate), float(margin),
                         None if cache_tokens is None else float(cache_tokens), float(fresh),
                         keep_homes,
                         parse_warmup(raw.get("warmup"), where))  # fmt: skip


def parse_warmup(raw: Any, where: str) -> WarmupConfig:
    """`routing.warmup` -> WarmupConfig; each prompt must be a chat head the router can send."""
    if raw is None:
        return WarmupConfig()
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: routing.warmup must be a mapping")
    defaults = WarmupConfig()
    heads = raw.get("heads", defaults.heads)
    concurrency = raw.get("concurrency", defaults.concurrency)
    for name, value, least in (("heads", heads, 0), ("concurrency", concurrency, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ConfigError(f"{where}: routing.warmup.{name} must be an integer >= {least}")
    timeout = raw.get("timeoutSeconds", defaults.timeout_s)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise ConfigError(f"{where}: routing.warmup.timeoutSeconds must be a number")
    if not math.isfinite(timeout) or timeout <= 0:
        raise ConfigError(f"{where}: routing.warmup.timeoutSeconds must be positive")
    prompts = raw.get("prompts", [])
    if not isinstance(prompts, list):
        raise ConfigError(f"{where}: routing.warmup.prompts must be a list")
    heads_out = []
    for i, prompt in enumerate(prompts):
        here = f"{where}: routing.warmup.prompts[{i}]"
        if not isinstance(prompt, Mapping) or set(prompt) - {"messages", "tools"}:
            raise ConfigError(f"{here} must be a mapping of `messages` and optionally `tools`")
        try:
            bodies.check_messages(prompt.get("messages"), bodies.Limits())
        except bodies.BodyError as err:
            raise ConfigError(f"{here}: {err}") from None
        head = head_of(prompt)
        if not head:
            raise ConfigError(f"{here}: needs system messages or tools to warm")
        heads_out.append(head)
    return WarmupConfig(heads, float(timeout), concurrency, tuple(heads_out))


def parse_member(raw: Any, where: str) -> api.RingMember:
    """`http://host:port` or `{name: ..., url: http://host:port}` -> RingMember."""
    if isinstance(raw, str):
        name, url = raw, raw
    elif isinstance(raw, Mapping) and isinstance(raw.get("url"), str):
        url = raw["url"]
        name = str(raw.get("name") or url)
    else:
        raise ConfigError(f"{where}: a member is a URL or a mapping with `url` (and `name`)")
    try:
        parsed = urllib.parse.urlsplit(url)
        port = parsed.port or 80
    except ValueError as err:
        raise ConfigError(f"{where}: member {url!r} is not a URL: {err}") from err
    if parsed.scheme != "http" or not parsed.hostname or parsed.path not in ("", "/"):
        raise ConfigError(f"{where}: member {url!r} must look like http://host:port")
    host = f"[{parsed.hostname}]" if ":" in parsed.hostname else parsed.hostname
    return api.RingMember(name=name, address=f"{host}:{port}")


def parse_static(doc: Any) -> dict[str, EndpointConfig]:
    """The static router file (see README) -> endpoints by id."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("endpoints"), Mapping):
        raise ConfigError("the config needs an `endpoints:` mapping of endpoint id -> members")
    endpoints = {}
    for endpoint_id, raw in doc["endpoints"].items():
        where = f"endpoints.{endpoint_id}"
        if not isinstance(endpoint_id, str) or not _DNS_LABEL.match(endpoint_id):
            raise ConfigError(f"{where}: endpoint ids are names like ep-support")
        if not isinstance(raw, Mapping) or not isinstance(raw.get("members"), list):
            raise ConfigError(f"{where}: needs `members:`, a list of member URLs")
        members = tuple(parse_member(m, where) for m in raw["members"])
        if not members:
            raise ConfigError(f"{where}: `members:` is empty (remove the endpoint instead)")
        for what, values in (("names", [m.name for m in members]),
                             ("URLs", [m.address for m in members])):  # fmt: skip
            if len(set(values)) != len(values):
                raise ConfigError(f"{where}: member {what} must be unique")
        endpoints[endpoint_id] = EndpointConfig(
            endpoint_id, members, parse_routing(raw.get("routing"), where)
        )
    return endpoints


def endpoint_from_resource(body: Mapping[str, Any]) -> EndpointConfig:
    """A CachedEndpoint -> its EndpointConfig (members from `status.ring`)."""
    meta, spec = body.get("metadata") or {}, body.get("spec") or {}
    status = body.get("status") or {}
    endpoint_id = str(status.get("endpointId") or spec.get("endpointId") or meta.get("name"))
    where = f"CachedEndpoint {meta.get('namespace')}/{meta.get('name')}"
    return EndpointConfig(
        endpoint_id,
        api.Ring.from_status(status.get("ring")).members,
        parse_routing(spec.get("routing"), where),
    )
