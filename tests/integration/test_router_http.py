"""The router over real HTTP in front of several `kvpin sim` instances on loopback."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import pathlib
import re
import time
from collections.abc import Awaitable

import aiohttp
import openai
import pytest
import yaml

from kvpin.router import auth
from kvpin.router.membership.base import FixedMembership
from kvpin.router.membership.static import StaticMembership
from tests.integration.conftest import StartRouter, StartSim, endpoint, eventually, replace_timing

SHORT_SYSTEM = "You are a helpful assistant."
LONG_SYSTEM = "You are the support agent of a large online shop; be precise and kind. " * 40


async def pool(start_sim: StartSim, n: int, **fields) -> list[str]:
    return [await start_sim(**fields) for _ in range(n)]


async def chat(session: aiohttp.ClientSession, url: str, messages, **extra) -> tuple[str, dict]:
    """POST a chat completion; the member that served it and the response body."""
    body = {"model": "ep-a", "messages": messages, "max_tokens": 4, **extra}
    async with session.post(f"{url}/v1/chat/completions", json=body) as r:
        assert r.status == 200, await r.text()
        if r.content_type == "text/event-stream":
            return r.headers["X-Kvpin-Member"], {"events": await r.text()}
        return r.headers["X-Kvpin-Member"], await r.json()


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of a metric's samples that carry these labels."""
    total = 0.0
    for line in text.splitlines():
        sample = line.startswith((name + "{", name + " "))
        if sample and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def scrape(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(f"{url}/metrics") as r:
        return await r.text()


async def test_every_turn_of_a_conversation_lands_on_one_pod(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    urls = await pool(start_sim, 4)
    router = await start_router(endpoint("ep-a", urls))
    served: dict[int, set[str]] = collections.defaultdict(set)
    async with aiohttp.ClientSession() as session:
        histories = {c: [{"role": "system", "content": SHORT_SYSTEM}] for c in range(12)}
        for turn in range(4):
            for c, history in histories.items():
                history.append(
                    {"role": "user", "content": f"conversation {c} asks question {turn}"}
                )
                member, body = await chat(session, router, history)
                served[c].add(member)
                if turn:
                    # the pod holds the whole previous prompt: all of it but the tail is cached
                    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] > 16 * turn
                history.append(
                    {"role": "assistant", "content": body["choices"][0]["message"]["content"]}
                )
    assert all(len(members) == 1 for members in served.values())
    assert len({m for members in served.values() for m in members}) >= 3  # spread over the pool


async def test_two_calls_sharing_a_long_system_prompt_hit_the_cache(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    router = await start_router(endpoint("ep-a", await pool(start_sim, 4)))
    async with openai.AsyncOpenAI(base_url=f"{router}/v1", api_key="x", max_retries=0) as client:
        for question in ("What is your return policy?", "Do you ship to Norway?"):
            response = await client.chat.completions.create(
                model="ep-a", max_tokens=8,
                messages=[{"role": "system", "content": LONG_SYSTEM},
                          {"role": "user", "content": question}],
            )  # fmt: skip
    assert response.usage.model_extra["prompt_cache_hit_tokens"] > 0
    assert response.usage.prompt_tokens_details.cached_tokens > 500


async def test_sessions_stick_by_header(start_sim: StartSim, start_router: StartRouter) -> None:
    router = await start_router(endpoint("ep-a", await pool(start_sim, 4), key="session"))
    async with aiohttp.ClientSession(headers={"X-Session-ID": "user-42"}) as session:
        members = {
            (await chat(session, router, [{"role": "user", "content": f"unrelated {i}"}]))[0]
            for i in range(10)
        }
    assert len(members) == 1


async def test_a_hot_endpoint_is_held_within_the_load_bound(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    # Each request lasts at least 5 s (100 tokens at 20/s, time scale 0.5): far longer than
    # sending all 40 takes even on a loaded machine, so all are in flight together.
    slow = replace_timing(decode_tokens_per_s=20, time_scale=0.5)
    router = await start_router(
        endpoint("ep-a", await pool(start_sim, 4, timing=slow), key="endpoint", load_factor=1.25)
    )
    async with aiohttp.ClientSession() as session:
        results = await asyncio.gather(
            *(chat(session, router, [{"role": "user", "content": "same"}], max_tokens=100)
              for _ in range(40))
        )  # fmt: skip
    counts = collections.Counter(member for member, _ in results)
    assert len(counts) == 4
    assert max(counts.values()) <= 13  # ceil(1.25 x 40 / 4): nobody melts


async def test_failover_when_an_instance_dies(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    urls = await pool(start_sim, 3)
    router = await start_router(endpoint("ep-a", urls))
    async with aiohttp.ClientSession() as session:
        before = {
            c: (await chat(session, router, [{"role": "user", "content": f"c{c}"}]))[0]
            for c in range(30)
        }
        victim = collections.Counter(before.values()).most_common(1)[0][0]
        await start_sim.runners[int(victim.split("-")[1])].cleanup()  # type: ignore[attr-defined]
        after = {
            c: (await chat(session, router, [{"role": "user", "content": f"c{c}"}]))[0]
            for c in range(30)
        }
        text = await scrape(session, router)
    assert victim not in after.values()
    moved = [c for c in before if before[c] != after[c]]
    assert set(moved) == {c for c in before if before[c] == victim}  # only the victim's keys move
    assert metric(text, "kvpin_router_ejections_total", member=victim) >= 1
    assert metric(text, "kvpin_router_retries_total") >= 1


async def test_5xx_before_any_byte_is_retried_elsewhere(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    from kvpin.sim.config import Faults

    broken = await start_sim(faults=Faults(error_rate=1.0))
    healthy = await start_sim()
    router = await start_router(endpoint("ep-a", [broken, healthy]))
    async with aiohttp.ClientSession() as session:
        members = {
            (await chat(session, router, [{"role": "user", "content": f"q{i}"}]))[0]
            for i in range(8)
        }
    assert members == {"pod-1"}


async def test_streaming_is_passed_through_chunk_by_chunk(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    slow = replace_timing(decode_tokens_per_s=20, time_scale=1.0)  # 20 tokens take 1 s
    router = await start_router(endpoint("ep-a", [await start_sim(timing=slow)]))
    async with aiohttp.ClientSession() as session:
        started = time.monotonic()
        body = {"model": "ep-a", "prompt": "hello", "max_tokens": 20, "stream": True}
        async with session.post(f"{router}/v1/completions", json=body) as r:
            await r.content.readline()
            first = time.monotonic() - started
            rest = await r.read()
            total = time.monotonic() - started
    # The sim takes at least 0.95 s for the 19 tokens after the first: a router that
    # buffered would deliver the first chunk about when the rest comes.
    assert total - first > 0.5
    assert rest.endswith(b"data: [DONE]\n\n")


async def test_a_client_that_disconnects_cancels_the_upstream_request(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    slow = replace_timing(decode_tokens_per_s=5, time_scale=1.0)
    sim = await start_sim(timing=slow)
    router = await start_router(endpoint("ep-a", [sim]))
    async with aiohttp.ClientSession() as session:
        body = {"model": "ep-a", "prompt": "hello", "max_tokens": 100, "stream": True}
        async with session.post(f"{router}/v1/completions", json=body) as r:
            await r.content.readline()
            assert metric(await scrape(session, sim), "vllm:num_requests_running") == 1
        # leaving the block closed the connection mid-stream

        async def stopped() -> bool:
            return metric(await scrape(session, sim), "vllm:num_requests_running") == 0

        await eventually("the upstream request to be cancelled", stopped)
        assert metric(await scrape(session, sim), "vllm:num_requests_running") == 0


async def test_metrics_add_up_to_what_the_engines_report(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    urls = await pool(start_sim, 3)
    router = await start_router(endpoint("ep-a", urls))
    async with aiohttp.ClientSession() as session:
        for i in range(12):
            messages = [
                {"role": "system", "content": LONG_SYSTEM},
                {"role": "user", "content": f"q{i}"},
            ]
            await chat(
                session,
                router,
                messages,
                stream=bool(i % 2),
                stream_options={"include_usage": True},
            )
        routed = await scrape(session, router)
        engines = [await scrape(session, url) for url in urls]
    assert metric(routed, "kvpin_router_prompt_tokens_total") == sum(
        metric(e, "vllm:prompt_tokens_total") for e in engines
    )
    assert (
        metric(routed, "kvpin_router_cached_prompt_tokens_total")
        == sum(metric(e, "vllm:prefix_cache_hits_total") for e in engines)
        > 0
    )
    assert metric(routed, "kvpin_router_requests_total", code="200") == 12


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{oops", 400, "invalid_request"),
        (b'{"messages": []}', 400, "invalid_request"),
        (b"[1]", 400, "invalid_request"),
        (b'{"model": "ep-missing", "prompt": "x"}', 404, "model_not_found"),
        (b'{"model": "ep-empty", "prompt": "x"}', 503, "no_ready_members"),
        (b'{"model": "ep-a", "prompt": "' + b"x" * 5000 + b'"}', 413, "request_too_large"),
    ],
)
async def test_bad_input_gets_an_openai_error_and_changes_nothing(
    start_sim: StartSim, start_router: StartRouter, body: bytes, status: int, code: str
) -> None:
    router = await start_router(
        endpoint("ep-a", [await start_sim()]), endpoint("ep-empty", []), max_body_bytes=4096
    )
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{router}/v1/completions", data=body) as r:
            assert r.status == status
            assert (await r.json())["error"]["code"] == code
            if status == 503:
                assert r.headers["Retry-After"]
        member, _ = await chat(session, router, [{"role": "user", "content": "still there?"}])
        assert member == "pod-0"


async def test_models_health_and_readiness(start_sim: StartSim, start_router: StartRouter) -> None:
    router = await start_router(endpoint("ep-a", [await start_sim()]), endpoint("ep-b", []))
    async with openai.AsyncOpenAI(base_url=f"{router}/v1", api_key="x") as client:
        assert [m.id for m in (await client.models.list()).data] == ["ep-a", "ep-b"]
    async with aiohttp.ClientSession() as session:
        for path in ("/healthz", "/readyz"):
            async with session.get(router + path) as r:
                assert r.status == 200
        async with session.get(f"{router}/nope") as r:
            assert r.status == 404 and "error" in await r.json()


async def test_router_replicas_make_the_same_choice(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    urls = await pool(start_sim, 4)
    # loads equal (idle) as each replica sees them: no engine scrapes catching a request
    # of another replica mid-flight
    replicas = [
        await start_router(endpoint("ep-a", list(urls)), engine_metrics_interval=0)
        for _ in range(3)
    ]
    async with aiohttp.ClientSession() as session:
        for i in range(20):
            messages = [{"role": "system", "content": LONG_SYSTEM},
                        {"role": "user", "content": f"conversation {i}"}]  # fmt: skip
            chosen = {(await chat(session, router, messages))[0] for router in replicas}
            assert len(chosen) == 1, chosen


async def test_a_turn_another_replica_placed_is_found_on_its_ring_owner(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    # Turns of one conversation reach different replicas (a round-robin Service). Replica A
    # places a first turn it knows nothing of on the key's ring owner. Replica B has sent the
    # same system prompt elsewhere, but not this conversation's first turn: the second turn
    # must go where A put it (the ring owner, where every replica sends an unseen
    # conversation), not to where B last sent the system prompt.
    urls = await pool(start_sim, 4)
    a, b = [  # no engine scrapes: a stale one could show B's finished requests as load to A
        await start_router(endpoint("ep-a", list(urls), key="session"), engine_metrics_interval=0)
        for _ in range(2)
    ]
    async with aiohttp.ClientSession() as session:
        for c in range(6):
            system = {"role": "system", "content": f"Agent {c}. " + LONG_SYSTEM * 2}
            session.headers["X-Session-ID"] = f"other-{c}"
            await chat(session, b, [system, {"role": "user", "content": "hello"}])
            session.headers["X-Session-ID"] = f"conversation-{c}"
            first = [system, {"role": "user", "content": f"{c}: " + LONG_SYSTEM * 3}]
            member, body = await chat(session, a, first)
            second = [*first, body["choices"][0]["message"], {"role": "user", "content": "and?"}]
            again, body = await chat(session, b, second)
            assert again == member
            assert body["usage"]["prompt_tokens_details"]["cached_tokens"] > 0.9 * (
                body["usage"]["prompt_tokens"] - 40)  # fmt: skip


async def test_conversations_of_a_popular_system_prompt_spread_over_the_pool(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    # Every conversation opens with one long system prompt. Following its holder would put
    # them all on one member; the head carries the whole endpoint, so it is copied to every
    # member and each conversation goes by its own walk. Two replicas in turn (a Service):
    # a second turn sent through the other replica finds the member of the first.
    urls = await pool(start_sim, 4)
    a, b = [  # no engine scrapes: a stale one could show a finished request as load
        await start_router(endpoint("ep-a", list(urls)), engine_metrics_interval=0)
        for _ in range(2)
    ]
    served: collections.Counter[str] = collections.Counter()
    async with aiohttp.ClientSession() as session:
        for c in range(32):
            first_replica, other = (a, b) if c % 2 else (b, a)
            first = [{"role": "system", "content": LONG_SYSTEM},
                     {"role": "user", "content": f"conversation {c}: where is it?"}]  # fmt: skip
            member, body = await chat(session, first_replica, first)
            served[member] += 1
            second = [*first, body["choices"][0]["message"], {"role": "user", "content": "and?"}]
            again, body = await chat(session, other, second)
            if c >= 16:  # each replica has counted 8, a whole window's floor, all of this head
                assert again == member, c
                assert body["usage"]["prompt_tokens_details"]["cached_tokens"] > 0.9 * (
                    body["usage"]["prompt_tokens"] - 40)  # fmt: skip
    assert len(served) == 4, served
    assert max(served.values()) <= 16, served


async def test_inbound_authentication(start_sim: StartSim, start_router: StartRouter) -> None:
    router = await start_router(
        endpoint("ep-a", [await start_sim()]), tokens=auth.parse_tokens("s3cret")
    )
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{router}/v1/completions", json={"model": "ep-a", "prompt": "x"}) as r,
    ):
        assert r.status == 401
        assert (await r.json())["error"]["type"] == "authentication_error"
    async with openai.AsyncOpenAI(base_url=f"{router}/v1", api_key="s3cret") as client:
        done = await client.completions.create(model="ep-a", prompt="x", max_tokens=1)
    assert done.usage.completion_tokens == 1


async def test_prefix_breaks_are_counted_by_zone(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    router = await start_router(endpoint("ep-a", [await start_sim()]), break_header=True)
    async with aiohttp.ClientSession() as session:
        headers = []
        for minute in range(3):
            system = f"{SHORT_SYSTEM} The time is 12:0{minute}."  # the careless client
            messages = [
                {"role": "system", "content": system},
                {"role": "user", "content": "Plan my day"},
            ]
            body = {"model": "ep-a", "max_tokens": 1, "messages": messages}
            async with session.post(f"{router}/v1/chat/completions", json=body) as r:
                headers.append(r.headers.get("X-Kvpin-Prefix-Break"))
        text = await scrape(session, router)
    assert headers == [None, "system", "system"]
    assert metric(text, "kvpin_router_prefix_breaks_total", zone="system") == 2


async def test_a_turn_whose_system_prompt_changed_goes_where_there_is_least_work(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    # A careless client writes the time into its system prompt: each later turn holds nothing
    # anywhere and has a new key. It goes to the member with the least work of the pool, not
    # where its previous prompt would be presumed (its walk's first member, which cannot hold
    # it), nor to the less busy of its walk's first two.
    slow = replace_timing(decode_tokens_per_s=20, time_scale=1.0)
    router = await start_router(
        endpoint("ep-a", await pool(start_sim, 3, timing=slow)), engine_metrics_interval=0
    )
    async with aiohttp.ClientSession() as session, contextlib.AsyncExitStack() as streams:
        busy: set[str] = set()
        for i in range(6):  # long answers keep two members busy (100 s each)
            story = [{"role": "user", "content": f"Tell a long story, {i}"}]
            body = {"model": "ep-a", "stream": True, "max_tokens": 2000, "messages": story}
            r = await streams.enter_async_context(
                session.post(f"{router}/v1/chat/completions", json=body)
            )
            busy.add(r.headers["X-Kvpin-Member"])
            if len(busy) == 2:
                break
        assert len(busy) == 2
        history = [{"role": "user", "content": "Plan my day"}]
        for minute in range(8):
            system = {"role": "system", "content": f"{SHORT_SYSTEM} The time is 12:0{minute}."}
            member, body = await chat(session, router, [system, *history], max_tokens=1)
            if minute:
                assert member not in busy, (minute, member, busy)
            history += [body["choices"][0]["message"], {"role": "user", "content": "And then?"}]


async def test_a_completion_prompt_that_grows_is_no_prefix_break(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    # A client of /v1/completions sends its whole conversation as one prompt that grows: the
    # cache keeps it, and the break metric must not say otherwise. Rewriting it is a break.
    router = await start_router(endpoint("ep-a", [await start_sim()]), break_header=True)
    story = "Once upon a time there was a king. " * 300  # 10,500 characters
    rewritten = story[:9000] + "queen" + story[9005:]  # the same opening (8,192 characters)
    found = []
    async with aiohttp.ClientSession() as session:
        for prompt in (story, story + " And then?", story + " And then? And?", rewritten):
            body = {"model": "ep-a", "max_tokens": 1, "prompt": prompt}
            async with session.post(f"{router}/v1/completions", json=body) as r:
                assert r.status == 200
                found.append(r.headers.get("X-Kvpin-Prefix-Break"))
    assert found == [None, None, None, "history"]


async def test_the_static_file_reloads_without_dropping_requests(
    start_sim: StartSim, start_router: StartRouter, tmp_path: pathlib.Path
) -> None:
    slow = replace_timing(decode_tokens_per_s=10, time_scale=1.0)  # 30 tokens: 3 s
    urls = await pool(start_sim, 3, timing=slow)
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump({"endpoints": {"ep-a": {"members": urls[:1]}}}))
    membership = StaticMembership(path, interval=0.05)
    router = await start_router(membership=membership)

    async def members() -> list[str]:
        return [m.name for m in membership.endpoints["ep-a"].config.members]

    async with aiohttp.ClientSession() as session:
        body = {"model": "ep-a", "prompt": "hello", "max_tokens": 30, "stream": True}
        async with session.post(f"{router}/v1/completions", json=body) as r:
            path.write_text(yaml.safe_dump({"endpoints": {"ep-a": {"members": urls[1:]}}}))
            await eventually("the reload", lambda: _equal(members(), urls[1:]))
            assert not r.content.at_eof()  # the reload came while the request was in flight
            streamed = await r.read()  # the request in flight was served whole
            assert streamed.endswith(b"data: [DONE]\n\n")
            assert len(re.findall(rb"data: ", streamed)) == 32  # 30 tokens, the finish, [DONE]
        path.write_text("endpoints: [this is not valid")
        await eventually(
            "the broken file to be read and refused",
            lambda: _metric_is(session, router, "kvpin_router_membership_errors_total", 1),
        )
        assert await members() == urls[1:]
        member, _ = await chat(session, router, [{"role": "user", "content": "hi"}])
    assert member in urls[1:]


async def _equal(value: Awaitable[object], expected: object) -> bool:
    return await value == expected


async def _metric_is(session: aiohttp.ClientSession, url: str, name: str, value: float) -> bool:
    return metric(await scrape(session, url), name) == value


async def test_a_restarted_member_keeps_its_keys_at_a_new_address(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    urls = await pool(start_sim, 4)
    membership = FixedMembership({"ep-a": endpoint("ep-a", urls)})
    router = await start_router(membership=membership)
    async with aiohttp.ClientSession() as session:
        conversations = [[{"role": "user", "content": f"c{i}"}] for i in range(20)]
        before = [(await chat(session, router, c))[0] for c in conversations]
        moved = [*urls[:3], await start_sim()]  # pod-3 comes back elsewhere
        membership.publish({"ep-a": endpoint("ep-a", moved)})
        after = [(await chat(session, router, c))[0] for c in conversations]
    assert before == after


async def test_a_member_that_never_answers_times_out_with_504(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    from kvpin.router.config import Timeouts

    stuck = await start_sim(timing=replace_timing(prefill_tokens_per_s=1, time_scale=1.0))
    router = await start_router(
        endpoint("ep-a", [stuck]), timeouts=Timeouts(first_byte=0.3), max_attempts=1
    )
    async with aiohttp.ClientSession() as session:
        body = {"model": "ep-a", "prompt": "a prompt that takes minutes to prefill"}
        async with session.post(f"{router}/v1/completions", json=body) as r:
            assert r.status == 504
            assert (await r.json())["error"]["code"] == "upstream_timeout"
    # (the prompt takes minutes to prefill: a 504 at all is the first-byte timeout's doing)


async def test_a_turn_sent_while_the_previous_one_streams_finds_its_home(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    # Open-loop clients (and trace replays) send a conversation's next prompt before the
    # previous answer has ended. Its prefix was sent to a member when the previous turn was:
    # the router knows where it is from that moment, not only once the answer is complete.
    slow = replace_timing(decode_tokens_per_s=20)
    router = await start_router(endpoint("ep-a", await pool(start_sim, 4, timing=slow)))
    async with aiohttp.ClientSession() as session:
        for c in range(6):
            text = f"document {c}: " + LONG_SYSTEM * 4  # several chunks of the placement index
            body = {"model": "ep-a", "max_tokens": 8, "stream": True,
                    "messages": [{"role": "user", "content": text}]}  # fmt: skip
            async with session.post(f"{router}/v1/chat/completions", json=body) as first:
                await first.content.readany()  # its prefill is done; it is still decoding
                member, _ = await chat(
                    session, router, [{"role": "user", "content": text + " And then?"}]
                )
                assert member == first.headers["X-Kvpin-Member"]
                await first.read()


async def test_a_prompt_is_known_where_it_was_sent_before_its_answer_ends(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    # Conversations keyed by session share one long system prompt. While the first one's
    # answer still streams, the next finds that prompt on its member (the index records a
    # prompt when it is sent) and goes there, instead of being placed as if nothing were
    # cached anywhere. One conversation each, in four rounds (a router each, with its own
    # system prompt): more would be passed over to copy the head to a second member, as
    # that member opened more than its share of the new conversations (placement.Openings).
    slow = replace_timing(decode_tokens_per_s=20)
    urls = await pool(start_sim, 4, timing=slow)
    async with aiohttp.ClientSession() as session:
        for r in range(4):
            router = await start_router(endpoint("ep-a", urls, key="session"))
            system = {"role": "system", "content": f"round {r}: " + LONG_SYSTEM * 4}
            body = {"model": "ep-a", "max_tokens": 8, "stream": True,
                    "messages": [system, {"role": "user", "content": "first"}]}  # fmt: skip
            url = f"{router}/v1/chat/completions"
            async with session.post(url, json=body, headers={"X-Session-ID": "s-0"}) as first:
                await first.content.readany()  # prefilled, still decoding
                home = first.headers["X-Kvpin-Member"]
                session.headers["X-Session-ID"] = "s-1"
                question = {"role": "user", "content": "a question"}
                assert (await chat(session, router, [system, question]))[0] == home, r
                await first.read()
            del session.headers["X-Session-ID"]


async def test_a_short_turn_stays_where_its_conversation_went_while_that_member_is_busy(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    # Chat turns shorter than a chunk of the placement index: beyond the shared system prompt
    # the index names nothing of the conversation, so it cannot say where the history is. The
    # router remembers where it sent the conversation's previous turn, and a later turn goes
    # there although that member is busier (by a decode) than another holding the head.
    slow = replace_timing(decode_tokens_per_s=20)
    router = await start_router(
        endpoint("ep-a", await pool(start_sim, 4, timing=slow)), engine_metrics_interval=0
    )
    system = {"role": "system", "content": LONG_SYSTEM}
    async with aiohttp.ClientSession() as session:
        for c in range(8):  # the head opens every conversation: it is spread over the pool
            await chat(session, router, [system, {"role": "user", "content": f"hello {c}"}])
        first = [system, {"role": "user", "content": "Where is my parcel?"}]
        home, body = await chat(session, router, first)
        again = {"model": "ep-a", "stream": True, "max_tokens": 2000, "messages": first}
        async with session.post(f"{router}/v1/chat/completions", json=again) as busy:
            assert busy.headers["X-Kvpin-Member"] == home  # the same turn again: same member
            await busy.content.readany()  # prefilled; decoding for a long while
            second = [*first, body["choices"][0]["message"], {"role": "user", "content": "Hm?"}]
            member, answer = await chat(session, router, second)
            assert member == home
            # its whole previous prompt is cached there, but for the block it ended in
            cached = answer["usage"]["prompt_tokens_details"]["cached_tokens"]
            assert cached > body["usage"]["prompt_tokens"] - 16


async def test_conversations_of_several_agents_open_evenly_and_stay_where_they_opened(
    start_sim: StartSim, start_router: StartRouter
) -> None:
    # Six agents (a system prompt of about a chunk and a half each) open 24 conversations,
    # eight of them agent 0's, a third: under a member and a half's worth of four, so each
    # agent's head is kept where it is (placement.head_members). Following the heads would
    # open eight or more on one member; a member that opened more than its share of them, and
    # one, is passed over, so none opens more than seven. Every later turn goes where its
    # conversation opened and finds its history there, also where the previous turn's answer
    # takes it past what the placement index names: each first prompt ends just short of a
    # chunk boundary, so the index names one chunk of it.
    router = await start_router(
        endpoint("ep-a", await pool(start_sim, 4)), engine_metrics_interval=0
    )
    others = itertools.cycle(range(1, 6))
    agents = [0 if c in {0, 4, 8, 11, 14, 17, 20, 23} else next(others) for c in range(24)]
    opened: collections.Counter[str] = collections.Counter()
    conversations = []
    async with aiohttp.ClientSession() as session:
        for c, agent in enumerate(agents):
            system = f"You are agent {agent}. " + LONG_SYSTEM
            text = f"conversation {c}: " + "where is my parcel? " * 100
            first = [{"role": "system", "content": system},
                     {"role": "user", "content": text[: 4080 - len(system)]}]  # fmt: skip
            member, body = await chat(session, router, first, max_tokens=32)
            opened[member] += 1
            conversations.append((member, first, body))
        assert max(opened.values()) <= 7, opened
        for turn in range(2):
            for c, (member, before, body) in enumerate(conversations):
                messages = [*before, body["choices"][0]["message"],
                            {"role": "user", "content": f"and then? ({turn})"}]  # fmt: skip
                again, answer = await chat(session, router, messages, max_tokens=32)
                assert again == member, (c, turn)
                cached = answer["usage"]["prompt_tokens_details"]["cached_tokens"]
                assert cached > body["usage"]["prompt_tokens"] - 16, (c, turn)
                conversations[c] = (member, messages, answer)
