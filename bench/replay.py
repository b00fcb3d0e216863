"""Replaying load against a target. Closed loop (`replay`): every conversation's turns in
order, many conversations at once, each answer fed into the next turn as a real client would.
Open loop (`replay_trace`): each request of a trace sent at its own time, whatever the answers
before it, as real traffic arrives. Sessions (`replay_sessions`, the `agentic` workload):
conversations arrive open loop, and within each the next turn follows the answer after the
conversation's think time.

I/O (aiohttp on loopback). Requests stream; TTFT is the time to the first content chunk; the
usage of the last chunk gives prompt and cached tokens.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from kvpin.bench import traces, workloads
from kvpin.bench.scoring import Record
from kvpin.bench.targets import Target


@dataclasses.dataclass
class Replay:
    """What a replay produced: records, the bodies in the order sent, its duration."""

    records: list[Record] = dataclasses.field(default_factory=list)
    bodies: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    makespan_s: float = 0.0
    changes: list[float] = dataclasses.field(default_factory=list)
    """When the pool changed (monotonic), in a lifecycle scenario (bench.scenarios)."""


async def _send(
    session: aiohttp.ClientSession,
    url: str,
    body: dict[str, Any],
    session_id: str | None,
    request: int,
) -> tuple[Record, str]:
    """Send the `request`th body; its record and the answer's text."""
    started = time.monotonic()
    ttft = None
    text: list[str] = []
    usage: dict[str, Any] = {}
    pod = None
    headers = {"X-Session-ID": session_id} if session_id else {}
    try:
        async with session.post(
            f"{url}/v1/chat/completions", json=body, headers=headers
        ) as response:
            if response.status != 200:
                await response.read()
                raise aiohttp.ClientResponseError(response.request_info, (), status=response.status)
            async for line in response.content:
                if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                    continue
                event = json.loads(line[6:])
                pod = pod or event.get("system_fingerprint")
                for choice in event.get("choices") or []:
                    content = (choice.get("delta") or {}).get("content")
                    if content:
                        ttft = ttft if ttft is not None else time.monotonic() - started
                        text.append(content)
                usage = event.get("usage") or usage
    except (TimeoutError, aiohttp.ClientError, ValueError):
        return Record(body["model"], started, 0.0, 0, 0, False, request=request), ""
    details = usage.get("prompt_tokens_details") or {}
    record = Record(
        endpoint=body["model"],
        started=started,
        ttft_s=ttft if ttft is not None else time.monotonic() - started,
        prompt_tokens=int(usage.get("prompt_tokens", 0)),
        cached_tokens=int(details.get("cached_tokens", 0)),
        ok=bool(usage),
        pod=pod if isinstance(pod, str) else None,
        request=request,
    )
    return record, "".join(text)


async def _turn(
    session: aiohttp.ClientSession,
    target: Target,
    conversation: workloads.Conversation,
    body: dict[str, Any],
    *,
    result: Replay,
    progress: Callable[[int], None],
) -> str | None:
    """Send one turn where the target says; its answer, None if it failed."""
    url = await target.choose(conversation.endpoint, body)
    result.bodies.append(body)
    try:
        record, answer = await _send(session, url, body, conversation.id, len(result.bodies) - 1)
    finally:
        target.done(url)
    result.records.append(record)
    progress(1)
    return answer if record.ok else None


async def replay(
    workload: workloads.Workload,
    target: Target,
    *,
    concurrency: int,
    progress: Callable[[int], None] = lambda n: None,
) -> Replay:
    """Run every conversation; at most `concurrency` of them at once."""
    result = Replay()
    queue: asyncio.Queue[workloads.Conversation] = asyncio.Queue()
    for conversation in workload.conversations:
        queue.put_nowait(conversation)
    clock = iter(range(10**9))

    async def worker(session: aiohttp.ClientSession) -> None:
        while not queue.empty():
            conversation = queue.get_nowait()
            answers: list[str] = []
            for _ in conversation.user_turns:
                body = workloads.build_request(
                    workload, conversation, answers, clock=f"12:00:{next(clock):06d}"
                )
                answer = await _turn(
                    session, target, conversation, body, result=result, progress=progress
                )
                if answer is None:
                    break  # a conversation whose turn failed cannot go on honestly
                answers.append(answer)

    started = time.monotonic()
    timeout = aiohttp.ClientTimeout(total=300)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    result.makespan_s = time.monotonic() - started
    await target.close()
    return result


async def replay_sessions(
    workload: workloads.Workload,
    target: Target,
    *,
    speed: float = 1.0,
    progress: Callable[[int], None] = lambda n: None,
) -> Replay:
    """Start each conversation at its arrival time (divided by `speed`); its turns follow
    each answer after its think time. A failed turn ends its conversation."""
    result = Replay()

    async def conversation(session: aiohttp.ClientSession, conv: workloads.Conversation) -> None:
        await asyncio.sleep(max(0.0, started + conv.arrival_s / speed - time.monotonic()))
        answers: list[str] = []
        for turn in range(len(conv.user_turns)):
            if turn:
                await asyncio.sleep(conv.think_s[turn] / speed)
            body = workloads.build_request(workload, conv, answers)
            answer = await _turn(session, target, conv, body, result=result, progress=progress)
            if answer is None:
                return
            answers.append(answer)

    timeout = aiohttp.ClientTimeout(total=300)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        started = time.monotonic()
        await asyncio.gather(*(conversation(session, c) for c in workload.conversations))
    result.makespan_s = time.monotonic() - started
    await target.close()
    return result


async def replay_trace(
    requests: list[traces.TraceRequest],
    endpoint: str,
    target: Target,
    *,
    speed: float = 1.0,
    progress: Callable[[int], None] = lambda n: None,
) -> Replay:
    """Send each request at its trace time divided by `speed`, open loop."""
    result = Replay()
    result.bodies = [traces.build_body(endpoint, r) for r in requests]

    async def one(session: aiohttp.ClientSession, index: int, at_s: float) -> None:
        await asyncio.sleep(max(0.0, started + at_s / speed - time.monotonic()))
        body = result.bodies[index]
        url = await target.choose(endpoint, body)
        try:
            record, _ = await _send(session, url, body, None, index)
        finally:
            target.done(url)
        result.records.append(record)
        progress(1)

    timeout = aiohttp.ClientTimeout(total=600)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        started = time.monotonic()
        await asyncio.gather(*(one(session, i, r.at_s) for i, r in enumerate(requests)))
    result.makespan_s = time.monotonic() - started
    await target.close()
    return result
