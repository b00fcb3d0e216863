"""The proxy: pick a member for each request, forward it, stream the answer back.

I/O at the edge. Per request: authenticate (router.auth), read the body (bounded in size and
time), summarize it (router.bodies, on or off the event loop: router.parsing), find the endpoint
named by `model`, key the request (router.keys), walk the key's ring (router.ring) and place
the request by cost (router.placement, from router.holdings, router.estimates and the
members' own load, router.loads), and forward the body as it came (every engine serves the
endpoint id as a model alias, so `model` needs no rewrite; only a tenant's `cache_salt` is ever
added) to the route's own path on the member: the client's path picks one of a fixed set of
routes and is never copied. The answer is copied back chunk by chunk as it arrives:
`iter_any()` -> `write()` keeps aiohttp's flow control end to end and nothing is buffered. A
copy of each chunk goes to a UsageReader for the cache metrics.

Failover: a connect error, a timeout before the first byte, or a 5xx status before anything
reached the client is retried on the next member of the walk (up to `max_attempts` members);
router.outliers decides whom to eject. Once bytes have reached the client nothing is retried; a
stream that breaks is cut, so the client sees it incomplete rather than ended.

Every wait has a deadline: the client's body, each upstream step, each write to the client.
In-flight counts are raised and lowered in one `with` block, so a cancelled request (a client
that went away) lowers them too.

State kept here, per router replica: in-flight counts (the loads of the hard cap), outliers,
the holdings index and the estimates, each bounded; all of a member's state goes when it leaves
the ring.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import functools
import itertools
import logging
import time
from collections.abc import Callable, Iterator, Mapping

import aiohttp
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from kvpin import api, logs
from kvpin.router import (
    auth,
    bodies,
    errors,
    headers,
    holdings,
    keys,
    parsing,
    placement,
    ring,
    usage,
    warmup,
)
from kvpin.router.breaks import HEAD_ZONES, BreakDetector
from kvpin.router.config import ProxySettings
from kvpin.router.estimates import Estimates, Sent
from kvpin.router.holdings import Holdings
from kvpin.router.loads import EngineLoads
from kvpin.router.membership.base import Endpoint, Membership
from kvpin.router.metrics import RouterMetrics
from kvpin.router.outliers import Outliers
from kvpin.router.replicas import FORWARDED_HEADER, Replicas, follow_dns

log = logging.getLogger(logs.PROXY)
MEMBER_HEADER = "X-Kvpin-Member"
BREAK_HEADER = "X-Kvpin-Prefix-Break"
REPLICA_CONNECT_S = 1.0  # a replica that takes no connection by then is passed over
NO_MEMBER_RETRY_AFTER = 5.0


@dataclasses.dataclass(frozen=True)
class Facts:
    """What placement needs of one request, sized in tokens."""

    key: str
    fresh_key: str  # places a new conversation: the key, and in prefix mode its opening too
    scope: bytes  # the cache salt: prompts with different salts share nothing
    chunks: bytes  # the prompt's chunk names (router.holdings)
    prompt_chars: int
    prompt_tokens: int
    previous_tokens: int  # of the previous turn's prompt, which this one extends (else 0)
    head_tokens: int = 0  # of its system prompt and tools: what conversations share
    first_tokens: int = 0  # of its first turn's prompt (the first message after the head)
    head_share: float = 1.0  # of the endpoint's new conversations opening with its head
    head_changed: bool = False  # its system prompt or tools since its previous turn
    opens: bool = False  # a new conversation with a system prompt or tools (placement.Openings)
    conversation: str = ""  # as the break detector names it
    last_member: api.RingMember | None = None  # where this replica sent its previous turn
    sent_chars: int = 0  # of that turn's prompt, when it is the turn right before this one


@dataclasses.dataclass(frozen=True)
class Placed:
    """Where one attempt goes, and why."""

    member: api.RingMember
    spilled: bool  # its home (else the key's ring owner) was passed over: over the cap or full
    moved: bool  # the cost rule took it off its home
    uncached: int  # tokens the member is expected to compute
    alone: bool  # nothing was queued ahead of it there


class Prefill:
    """The prefill a request waits for on a member: counted as queued work until its first
    token arrives, or until the attempt ends without one."""

    def __init__(self, estimates: Estimates, endpoint: str, member: str, tokens: int) -> None:
        self.estimates, self._request = estimates, (endpoint, member, tokens)
        self._sent: Sent | None = None

    def __enter__(self) -> Prefill:
        self._sent = self.estimates.sent(*self._request)
        return self

    def __exit__(self, *_: object) -> None:
        self.done()

    def done(self) -> None:
        if self._sent is not None:
            self.estimates.answered(self._sent)
            self._sent = None


@dataclasses.dataclass
class Learning:
    """What an answer teaches: the request's facts, where it went, when its first token came."""

    facts: Facts
    placed: Placed
    prefill: Prefill
    first_token: float | None = None


class _Response(web.StreamResponse):
    """A streamed response whose headers go out with its first chunk: one send instead of two
    per small answer. (aiohttp's own Response does the same through this class attribute since
    3.11; on older versions it is simply ignored.)"""

    _send_headers_immediately = False


class Proxy:
    """The router's request path and the little state it keeps."""

    def __init__(
        self, membership: Membership, settings: ProxySettings, metrics: RouterMetrics
    ) -> None:
        self.membership = membership
        self.settings = settings
        self.metrics = metrics
        self.session: aiohttp.ClientSession | None = None
        self.parser = parsing.Parser(settings.parse)
        self.loads: collections.defaultdict[str, dict[str, int]] = collections.defaultdict(dict)
        self.outliers = Outliers(settings.outliers)
        self.holdings: dict[str, Holdings] = {}  # per endpoint
        self.estimates = Estimates()
        self.engines = EngineLoads(
            self._member_urls, self._mine_at, interval=settings.engine_metrics_interval
        )
        self._by_url: tuple[Mapping[str, Endpoint], dict[str, list[tuple[str, str]]]] = ({}, {})
        self.breaks = BreakDetector(settings.conversations)
        self.heads: collections.defaultdict[str, warmup.HotHeads] = collections.defaultdict(
            warmup.HotHeads
        )
        self.demand: collections.defaultdict[str, placement.Demand] = collections.defaultdict(
            placement.Demand
        )
        self.openings: collections.defaultdict[str, placement.Openings] = collections.defaultdict(
            placement.Openings
        )
        self.warmer = warmup.Warmer(metrics, self._warmed)
        self.replicas = Replicas(settings.replica, settings.replicas)
        self._follow: asyncio.Task[None] | None = None
        membership.listeners.append(self.forget)

    async def start(self) -> None:
        """Open the upstream connection pool and the parse workers."""
        t = self.settings.timeouts
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=60),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=t.connect),
            auto_decompress=False,
            skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type"),
        )
        self.parser.start()
        self.engines.start(self.session)
        self.warmer.start(self.session)
        if self.settings.replicas_dns:
            self._follow = asyncio.get_running_loop().create_task(
                follow_dns(self.replicas, self.settings.replicas_dns)
            )

    async def close(self) -> None:
        if self._follow is not None:
            self._follow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follow
        self.parser.close()
        await self.engines.stop()
        await self.warmer.stop()
        if self.session:
            await self.session.close()

    def _holdings(self, ep: str) -> Holdings:
        table = self.holdings.get(ep)
        if table is None:
            table = self.holdings[ep] = Holdings(self.settings.holdings_bytes)
        return table

    def _members_by_url(self) -> dict[str, list[tuple[str, str]]]:
        """(endpoint, member) pairs behind each URL, rebuilt when membership changes."""
        endpoints, index = self._by_url
        if endpoints is not self.membership.endpoints:
            endpoints, index = self.membership.endpoints, collections.defaultdict(list)
            for ep, e in endpoints.items():
                for m in e.config.members:
                    index[m.url].append((ep, m.name))
            self._by_url = endpoints, dict(index)
        return index

    def _member_urls(self) -> set[str]:
        return set(self._members_by_url())

    def _mine_at(self, url: str) -> int:
        """This replica's requests in flight to `url`."""
        pairs = self._members_by_url().get(url, ())
        return sum(self.loads.get(ep, {}).get(m, 0) for ep, m in pairs)

    # -- the request path ---------------------------------------------------------------------

    def authorize(self, request: web.Request) -> str | None:
        """The caller's tenant when tokens are configured (None when they are not)."""
        tokens = self.settings.tokens
        if not tokens:
            return None
        tenant = tokens.tenant_of(request.headers.get("Authorization", ""))
        if tenant is None:
            raise errors.UnauthorizedError("a valid bearer token is required")
        return tenant

    async def read_body(self, request: web.Request) -> bytes:
        """The raw body; 413, 408 and 400 for one that cannot be read."""
        limit = self.settings.max_body_bytes
        if (request.content_length or 0) > limit:
            raise errors.BodyTooLargeError(f"the body is larger than {limit} bytes")
        try:
            async with asyncio.timeout(self.settings.timeouts.client_body):
                raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise errors.BodyTooLargeError(f"the body is larger than {limit} bytes") from None
        except TimeoutError:
            raise errors.RequestTimeoutError("the body did not arrive in time") from None
        except (HttpProcessingError, RequestPayloadError) as err:
            raise errors.BadRequestError(f"the body cannot be read: {err}") from None
        encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
        try:
            return bodies.decode(raw, encoding, limit)
        except bodies.TooLargeError:
            raise errors.BodyTooLargeError(f"the body is larger than {limit} bytes") from None
        except bodies.BodyError as err:
            raise errors.BadRequestError(str(err)) from None

    def endpoint_of(self, model: str) -> Endpoint:
        """The endpoint named by `model`."""
        endpoint = self.membership.endpoints.get(model)
        if endpoint is None:
            raise errors.UnknownEndpointError(f"the endpoint `{model}` does not exist")
        return endpoint

    async def handle(self, request: web.Request, path: str) -> web.StreamResponse:
        """POST `path` (one of the inference routes): route and forward one request."""
        started = time.monotonic()
        tenant = self.authorize(request)
        raw = await self.read_body(request)
        try:
            summary = await self.parser.summarize(raw)
        except bodies.BodyError as err:
            raise errors.BadRequestError(str(err)) from None
        endpoint = self.endpoint_of(summary.model)
        ep, routing = endpoint.config.id, endpoint.config.routing
        received, relayed = raw, FORWARDED_HEADER in request.headers
        salt = summary.cache_salt
        if routing.cache_salt == "tenant":
            if tenant is None:
                raise errors.UnauthorizedError(
                    f"the endpoint `{ep}` keeps tenants' caches apart: a bearer token is required"
                )
            salt = auth.cache_salt(self.settings.tokens.secret, tenant, salt)
            raw = bodies.with_field(raw, "cache_salt", salt)
        session = keys.session_of(request.headers, summary.user, routing.session_header)
        conversation = keys.conversation_id(summary.opening, session)
        key = keys.routing_key(
            routing.key, ep, summary.head, session, prefix_chars=routing.prefix_chars, salt=salt
        )
        owner = None if relayed else self.replicas.owner(ep, time.monotonic())
        if owner is not None:
            answer = await self.to_replica(request, owner, ep, received)
            if answer is not None:
                return answer
        opens = bool(summary.head_chars) and summary.messages <= 1
        if opens:  # a new conversation of this head
            self.demand[ep].add(key)
        self.heads[ep].seen(summary.shared_head, salt)
        remembered = f"{ep}/{conversation}"  # the break detector's name for it
        seen = self.breaks.observe(remembered, summary.turn)
        broken = seen.broken
        if broken:
            self.metrics.of(self.metrics.prefix_breaks, ep, broken).inc()
        tokens = self.estimates.tokens
        prompt = max(1, tokens(ep, summary.prompt_chars))
        facts = Facts(
            key=key, fresh_key=keys.conversation_key(routing.key, key, conversation),
            scope=salt.encode("utf-8", "surrogatepass"), chunks=summary.chunks,
            prompt_chars=summary.prompt_chars, prompt_tokens=prompt,
            previous_tokens=0 if summary.messages <= 1 or broken else max(
                0, prompt - tokens(ep, summary.last_chars)),
            head_tokens=tokens(ep, summary.head_chars) if summary.head_chars else 0,
            first_tokens=tokens(ep, summary.first_chars),
            head_share=self.demand[ep].share(key) if summary.head_chars else 1.0,
            head_changed=broken in HEAD_ZONES, opens=opens,
            conversation=remembered, last_member=seen.member,
            sent_chars=seen.sent_chars,
        )  # fmt: skip
        return await self.forward(
            request, endpoint, path, raw, facts, broken=broken, started=started
        )

    def choose(self, endpoint: Endpoint, facts: Facts, tried: set[str]) -> Placed:
        """The member for this attempt, by cost (router.placement), within the hard cap.

        Candidates are the key's walk without tried and ejected members; members over the
        `loadFactor` cap are passed over unless all are, and for a new conversation following
        a head those that opened more than their share of them (placement.Openings). What each
        holds comes from router.holdings (the prefix chunks this replica sent it: a
        conversation's previous turns, a shared system prompt); the home and what each holds
        are worked out by placement.holders. A spill is a request whose home was passed over.
        """
        ep, routing = endpoint.config.id, endpoint.config.routing
        now = time.monotonic()
        exclude = tried | self.outliers.ejected(ep, now)
        if len(exclude) >= len(endpoint.ring):  # all ejected: better to try them than refuse
            exclude = tried
        warming = self.warmer.warming(ep)
        if warming and len(exclude | warming) < len(endpoint.ring):  # else: cold beats nothing
            exclude |= warming
        walk = [m for m in endpoint.ring.walk(facts.key) if m.name not in exclude]
        if not walk:
            raise ring.NoReadyMembersError
        loads = self.loads[ep]
        capped = ring.within_bound(
            walk, loads, load_factor=routing.load_factor, size=len(endpoint.ring),
        )  # fmt: skip
        by_conversation, spread = placement.new_conversations(
            head_tokens=facts.head_tokens, first_tokens=facts.first_tokens,
            share=facts.head_share, members=len(endpoint.ring), fresh_below=routing.fresh_below,
        )  # fmt: skip
        if facts.opens and not by_conversation:  # following a head: not to members that
            full = self.openings[ep].full(len(endpoint.ring))  # opened more than their share
            capped = [m for m in capped if m.name not in full] or capped
        engines = {m.name: self.engines.get(m.url, now) for m in walk}
        arrivals = self.estimates.arrivals[ep].rate(now) / len(endpoint.ring)
        table = self._holdings(ep)
        for name, engine in engines.items():
            size = routing.cache_tokens or (engine.capacity if engine is not None else None)
            if size:
                table.resize(name, self.estimates.chars(ep, size) / holdings.CHUNK_CHARS)
            self._admitting(ep, name)
        held = table.held(facts.scope, facts.chunks)
        saturated = placement.saturated(
            self.estimates.waiting_at(ep, m.name, engines[m.name]) for m in walk
        )
        trimmed = table.trimmed(facts.scope, facts.chunks, held) if saturated else {}
        believed = placement.believed(held, trimmed)

        allowed = None  # all
        if by_conversation and spread < len(endpoint.ring):  # the head's first members
            allowed = {m.name for m in itertools.islice(endpoint.ring.walk(facts.key), spread)}

        def conversation() -> Iterator[str]:  # its own walk, read only as far as needed
            walk = (m.name for m in endpoint.ring.walk(facts.fresh_key))
            return walk if allowed is None else (m for m in walk if m in allowed)

        last = facts.last_member
        home, cached = placement.holders(
            [m.name for m in walk],
            {m: round(n * holdings.CHUNK_CHARS) for m, n in believed.items()},
            prompt_tokens=facts.prompt_tokens,
            previous_tokens=facts.previous_tokens,
            tokens=functools.partial(self.estimates.tokens, ep),
            slack_chars=holdings.CHUNK_CHARS,
            order=conversation() if by_conversation else (),
            last=last.name if last else None,
            sent_chars=facts.sent_chars,
            lost=last is not None and endpoint.ring.members.get(last.name) != last,
        )
        candidates = [
            placement.Candidate(
                m.name,
                self.estimates.queued(ep, m.name, loads.get(m.name, 0), engines[m.name]),
                cached.get(m.name, 0),
                self.estimates.rate(ep, m.name, routing.prefill_tokens_per_s),
                self.estimates.waiting_at(ep, m.name, engines[m.name]),
                arrivals,
            )
            for m in capped
        ]
        decision = placement.decide(
            candidates, home, facts.prompt_tokens, routing.costs(),
            conversation() if routing.fresh_below else (),
            head_tokens=facts.head_tokens if by_conversation else 0,
            head_changed=facts.head_changed, saturated=saturated,
        )  # fmt: skip
        chosen = next(c for c in candidates if c.name == decision.member)
        return Placed(
            member=endpoint.ring.members[decision.member],
            spilled=all(c.name != (home or walk[0].name) for c in candidates),
            moved=decision.moved,
            uncached=max(0, facts.prompt_tokens - chosen.cached_tokens),
            alone=chosen.queued_tokens == 0,
        )

    async def forward(
        self,
        request: web.Request,
        endpoint: Endpoint,
        path: str,
        raw: bytes,
        facts: Facts,
        *,
        broken: str | None,
        started: float,
    ) -> web.StreamResponse:
        """Send to the chosen member, failing over before the first byte; relay the answer.

        When every attempt failed: the last member's own 5xx answer if that is what it gave,
        else 504 after a timeout, else 502.
        """
        ep = endpoint.config.id
        tried: set[str] = set()
        failed: list[str] = []  # members that failed this request: outliers if another serves
        failure: str | None = None
        timed_out = False
        last_5xx: web.Response | None = None
        upstream_headers = headers.upstream(
            request.headers, client=request.remote, scheme=request.scheme, host=request.host,
            strip_auth=bool(self.settings.tokens),
        )  # fmt: skip
        self.estimates.arrivals[ep].add(time.monotonic())  # once: a retry is no new arrival
        for attempt in range(self.settings.max_attempts):
            try:
                placed = self.choose(endpoint, facts, tried)
            except ring.NoReadyMembersError:
                break
            member = placed.member
            tried.add(member.name)
            self._placed(ep, attempt, placed, facts)
            with (
                self._in_flight(ep, member.name),
                Prefill(self.estimates, ep, member.name, placed.uncached) as prefill,
            ):
                try:
                    upstream = await self._send(
                        ep, member, path, raw, upstream_headers=upstream_headers, facts=facts
                    )
                except (aiohttp.ClientError, TimeoutError) as err:
                    failure = f"{member.name}: {type(err).__name__}"
                    log.warning("%s: %s %s", ep, failure, err)
                    timed_out, last_5xx = isinstance(err, TimeoutError), None
                    if isinstance(err, aiohttp.ClientConnectorError):  # nobody listens there
                        self.outliers.unreachable(ep, member.name, time.monotonic())
                        self._ejected(ep, member.name)
                    else:
                        failed.append(member.name)
                    continue
                try:
                    if upstream.status >= 500 and attempt + 1 < self.settings.max_attempts:
                        last_5xx = await self._error_answer(upstream)
                        failure, timed_out = f"{member.name}: HTTP {upstream.status}", False
                        failed.append(member.name)
                        continue
                    if upstream.status < 500:
                        self._served(ep, member.name, failed)
                    return await self._relay(
                        request,
                        upstream,
                        endpoint,
                        member,
                        broken=broken,
                        started=started,
                        learn=Learning(facts, placed, prefill),
                    )
                finally:
                    upstream.close()
        if failure is None:
            self.metrics.of(self.metrics.errors, ep, "no_member").inc()
            raise errors.NoMemberError(
                f"the endpoint `{ep}` has no ready member", retry_after=NO_MEMBER_RETRY_AFTER
            )
        self.metrics.of(self.metrics.errors, ep, "upstream").inc()
        log.warning("%s: no member answered (%d tried; last: %s)", ep, len(tried), failure)
        if last_5xx is not None:
            return last_5xx
        error = errors.UpstreamTimeoutError if timed_out else errors.UpstreamError
        raise error(
            f"no member of `{ep}` answered ({len(tried)} tried)", retry_after=NO_MEMBER_RETRY_AFTER
        )

    async def to_replica(
        self, request: web.Request, replica: str, ep: str, raw: bytes
    ) -> web.StreamResponse | None:
        """Relay the request as it came to the router replica that owns its endpoint, and its
        answer back (router.replicas); None when that replica could not be reached or failed
        before answering: the request is then decided here."""
        assert self.session is not None
        sent = headers.upstream(request.headers, client=request.remote, scheme=request.scheme,
                                host=request.host, strip_auth=False)  # fmt: skip
        sent[FORWARDED_HEADER] = self.replicas.me
        t, m = self.settings.timeouts, self.metrics
        try:
            async with asyncio.timeout(t.first_byte):
                upstream = await self.session.post(
                    replica + request.path, data=raw, headers=sent,
                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=REPLICA_CONNECT_S),
                )  # fmt: skip
        except (aiohttp.ClientError, TimeoutError) as err:
            log.warning("%s: replica %s did not answer (%s); deciding here", ep, replica,
                        type(err).__name__)  # fmt: skip
            self.replicas.failed(replica, time.monotonic())
            m.of(m.relayed, ep, "unreachable").inc()
            return None
        m.of(m.relayed, ep, "relayed").inc()
        try:
            response = _Response(status=upstream.status, reason=upstream.reason)
            for name, value in headers.downstream(upstream.headers):
                response.headers.add(name, value)
            if upstream.content_length is not None and upstream.headers.get("Content-Length"):
                response.content_length = upstream.content_length
            await self._copy(request, response, upstream, ep, source=replica)
            return response
        finally:
            upstream.close()

    async def _send(
        self,
        ep: str,
        member: api.RingMember,
        path: str,
        raw: bytes,
        *,
        upstream_headers: dict[str, str],
        facts: Facts,
    ) -> aiohttp.ClientResponse:
        """POST the request to `member`, recording in the placement index that it was sent
        there (taken back if it fails or is refused: the prompt never reached that cache)."""
        assert self.session is not None
        index = self._holdings(ep)
        self._admitting(ep, member.name)  # this request's prefill included (Prefill)
        recorded = index.record(facts.scope, facts.chunks, member.name)
        try:
            async with asyncio.timeout(self.settings.timeouts.first_byte):
                upstream = await self.session.post(
                    member.url + path, data=raw, headers=upstream_headers
                )
        except BaseException:
            index.retract(recorded, member.name)
            raise
        if upstream.status >= 300:
            index.retract(recorded, member.name)
        return upstream

    def _admitting(self, ep: str, member: str) -> None:
        unadmitted = self.estimates.chars(ep, self.estimates.unadmitted(ep, member))
        self._holdings(ep).admitting(member, unadmitted / holdings.CHUNK_CHARS)

    async def _error_answer(self, upstream: aiohttp.ClientResponse) -> web.Response:
        """A member's 5xx answer, to relay if no other member does better.

        Read for at most `timeouts.error_body` seconds and `max_error_body_bytes` bytes; one that
        is cut short (too slow, too large, broken) is replaced by an error of the router's own
        with the same status, never relayed truncated.
        """
        cap, body = self.settings.max_error_body_bytes, bytearray()
        try:
            async with asyncio.timeout(self.settings.timeouts.error_body):
                while len(body) <= cap and (chunk := await upstream.content.read(cap + 1)):
                    body += chunk
        except (aiohttp.ClientError, TimeoutError):
            body = bytearray(cap + 1)
        if len(body) > cap:
            err = errors.UpstreamError(f"the member answered HTTP {upstream.status}")
            response = errors.to_response(err)
            response.set_status(upstream.status)
            return response
        return web.Response(status=upstream.status, body=bytes(body),
                            content_type=upstream.content_type)  # fmt: skip

    async def _relay(
        self,
        request: web.Request,
        upstream: aiohttp.ClientResponse,
        endpoint: Endpoint,
        member: api.RingMember,
        *,
        broken: str | None,
        started: float,
        learn: Learning,
    ) -> web.StreamResponse:
        ep = endpoint.config.id
        m = self.metrics
        first_byte = time.monotonic()
        m.of(m.ttfb, ep, member.name).observe(first_byte - started)
        response = _Response(status=upstream.status, reason=upstream.reason)
        for name, value in headers.downstream(upstream.headers):
            response.headers.add(name, value)
        if upstream.content_length is not None and upstream.headers.get("Content-Length"):
            response.content_length = upstream.content_length
        response.headers[MEMBER_HEADER] = member.name
        if broken and self.settings.break_header:
            response.headers[BREAK_HEADER] = broken
        reader = usage.UsageReader(event_stream=upstream.content_type == "text/event-stream")

        def seen(chunk: bytes) -> None:
            if learn.first_token is None:
                learn.first_token = time.monotonic()
                learn.prefill.done()
            reader.feed(chunk)

        if not await self._copy(request, response, upstream, ep, source=member.name, seen=seen):
            return response
        m.of(m.requests, ep, member.name, str(upstream.status)).inc()
        m.of(m.latency, ep, member.name).observe(time.monotonic() - started)
        seen = reader.result()
        if seen is not None:
            m.of(m.prompt_tokens, ep).inc(seen.prompt_tokens)
            m.of(m.cached_tokens, ep).inc(seen.cached_tokens)
        if upstream.status < 300:  # an error answer says nothing of a member's speed
            self._learn(ep, member.name, learn, seen, started)
        return response

    async def _copy(
        self,
        request: web.Request,
        response: web.StreamResponse,
        upstream: aiohttp.ClientResponse,
        ep: str,
        *,
        source: str,
        seen: Callable[[bytes], None] = lambda chunk: None,
    ) -> bool:
        """Send `response` and copy `upstream`'s body into it as it arrives (`seen` reads each
        chunk first); False when it was cut (`source` broke, the client stalled) or the client
        went away."""
        t = self.settings.timeouts
        chunks = upstream.content.iter_any()
        try:
            await response.prepare(request)
            while True:
                try:
                    async with asyncio.timeout(t.idle):
                        chunk = await anext(chunks, None)
                except (aiohttp.ClientError, TimeoutError) as err:
                    # Bytes already reached the client: no retry. Cut the connection so the
                    # client sees an incomplete response, not one that looks finished.
                    log.warning("%s: upstream %s broke mid-response: %s", ep, source,
                                type(err).__name__)  # fmt: skip
                    self._cut(request, response, ep, "upstream_broken")
                    return False
                if chunk is None:
                    break
                seen(chunk)
                try:
                    async with asyncio.timeout(t.client_write):
                        await response.write(chunk)
                except TimeoutError:
                    log.info("%s: the client stopped reading; cutting its response", ep)
                    self._cut(request, response, ep, "client_stalled")
                    return False
            await response.write_eof()
        except ConnectionResetError:
            self.metrics.of(self.metrics.errors, ep, "client_disconnected").inc()
            return False
        except asyncio.CancelledError:
            self.metrics.of(self.metrics.errors, ep, "client_disconnected").inc()
            raise
        return True

    def _learn(
        self, ep: str, member: str, learn: Learning, seen: usage.Usage | None, started: float
    ) -> None:
        """Learn sizes and speed from the usage."""
        facts, prompt = learn.facts, learn.facts.prompt_tokens
        if seen is not None and seen.prompt_tokens:
            prompt = seen.prompt_tokens
            self.estimates.learn(
                ep, member, prompt_chars=facts.prompt_chars, prompt_tokens=prompt,
                uncached_tokens=prompt - seen.cached_tokens, alone=learn.placed.alone,
                ttft_s=(learn.first_token or time.monotonic()) - started,
            )  # fmt: skip

    def _placed(self, ep: str, attempt: int, placed: Placed, facts: Facts) -> None:
        """Note where an attempt went: for the conversation's next turn, for new conversations
        (a retry opens nothing new), and in the metrics."""
        self.breaks.sent(facts.conversation, placed.member)
        if facts.opens and not attempt:
            self.openings[ep].add(placed.member.name)
        m = self.metrics
        for counted, metric in ((attempt > 0, m.retries), (not attempt and placed.spilled,
                                m.spills), (not attempt and placed.moved, m.moves)):  # fmt: skip
            if counted:
                m.of(metric, ep).inc()

    def _cut(
        self, request: web.Request, response: web.StreamResponse, ep: str, reason: str
    ) -> web.StreamResponse:
        self.metrics.of(self.metrics.errors, ep, reason).inc()
        if request.transport is not None:
            request.transport.abort()
        return response

    # -- state ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _in_flight(self, ep: str, member: str) -> Iterator[None]:
        """Count a request on `member` for as long as the block runs, however it ends."""
        self._load(ep, member, +1)
        try:
            yield
        finally:
            self._load(ep, member, -1)

    def _load(self, ep: str, member: str, delta: int) -> None:
        loads = self.loads[ep]
        now = loads[member] = loads.get(member, 0) + delta
        current = self.membership.endpoints.get(ep)
        if now == 0 and (current is None or member not in current.ring.members):
            del loads[member]  # the last request on a member that left
            self.metrics.forget(ep, {member})
            return
        self.metrics.of(self.metrics.in_flight, ep, member).set(now)

    def _served(self, ep: str, member: str, failed: list[str]) -> None:
        """`member` answered: the members that failed this request before it were at fault."""
        self.outliers.succeeded(ep, member)
        now = time.monotonic()
        for name in failed:
            if self.outliers.failed(ep, name, now):
                self._ejected(ep, name)

    def _ejected(self, ep: str, member: str) -> None:
        log.warning("%s: ejecting %s for %gs", ep, member, self.settings.outliers.eject_seconds)
        self.metrics.of(self.metrics.ejections, ep, member).inc()

    def forget(self, old: Mapping[str, Endpoint], new: Mapping[str, Endpoint]) -> None:
        """Follow a membership change: drop the state and series of endpoints and members that
        left; a member back at a new address (restarted) holds nothing; joining members are
        warmed before they take new keys (router.warmup)."""
        for ep in old.keys() | new.keys():
            before, after = old.get(ep), new.get(ep)
            joined, cold = warmup.joined(_addresses(before), _addresses(after))
            for member in cold:
                self.warmer.cancel(ep, member)
            if before is not None:
                self._drop(ep, cold, after)
            if after is None or joined or cold:  # shares of another pool
                self.openings.pop(ep, None)
            if after is None:
                self.heads.pop(ep, None)
                self.demand.pop(ep, None)
                continue
            if (joined or cold) and not after.config.routing.keep_homes:
                self.holdings.pop(ep, None)  # every key follows the new ring
            if joined:
                config = after.config.routing.warmup
                heads = [(h, "") for h in config.prompts] + self.heads[ep].top(config.heads)
                items = [warmup.warming(ep, h, s) for h, s in dict.fromkeys(heads)]
                for name in joined:
                    member = after.ring.members[name]
                    self.warmer.warm(ep, name, member.url, items, config)

    def _warmed(self, ep: str, member: str, item: warmup.Warming) -> None:
        self._holdings(ep).record(item.scope, item.chunks, member)

    def _drop(self, ep: str, cold: set[str], after: Endpoint | None) -> None:
        """Forget what was known of members whose cache is gone (`cold`)."""
        gone = cold - set(after.ring.members if after else ())
        if after is None:
            self.metrics.forget(ep)
        idle = {m for m in gone if not self.loads.get(ep, {}).get(m)}
        self.metrics.forget(ep, idle)
        self.outliers.forget(ep, cold)
        if after is None:
            self.holdings.pop(ep, None)
        elif ep in self.holdings:
            self.holdings[ep].forget(cold)
        if after is None:
            self.estimates.drop(ep)
        else:
            self.estimates.forget(ep, cold)
        for member in idle:
            self.loads.get(ep, {}).pop(member, None)
        if after is None and not self.loads.get(ep):
            self.loads.pop(ep, None)


def _addresses(endpoint: Endpoint | None) -> list[tuple[str, str]]:
    return [(m.name, m.address) for m in endpoint.config.members] if endpoint else []
