"""Misbehaving engines and clients on loopback, for the fault tier.

These are real HTTP servers and sockets, but not engines: each one is broken on purpose in one
way a real engine or network can be (a 500 that stalls, resets or never ends, a stream nobody
reads, a request shape that crashes every engine), which `kvpin sim` cannot be made to do.
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

MiB = 2**20


async def _ok(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    if "poison" in json.dumps(body):  # a shape every engine crashes on
        return web.json_response({"error": {"message": "engine crashed"}}, status=500)
    usage = {"prompt_tokens": 3, "completion_tokens": 1}
    return web.json_response(
        {"object": "chat.completion", "headers": dict(request.headers), "usage": usage,
         "path": request.path_qs, "choices": [{"message": {"content": "ok"}}]}
    )  # fmt: skip


async def _stalled_500(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(status=500)
    response.content_length = 100
    await response.prepare(request)
    await response.write(b"{")
    await asyncio.sleep(3600)
    return response


async def _huge_500(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(status=500, headers={"Content-Type": "application/json"})
    await response.prepare(request)
    for _ in range(8):
        await response.write(b" " * MiB)
    await response.write_eof()
    return response


async def _reset_500(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(status=500)
    response.content_length = 1000
    await response.prepare(request)
    await response.write(b'{"error": ')
    assert request.transport is not None
    request.transport.abort()
    return response


async def _endless(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    chunk = b"data: " + b"x" * (64 * 2**10) + b"\n\n"
    while True:
        await response.write(chunk)


async def _busy_503(request: web.Request) -> web.StreamResponse:
    """An engine's own error answer, naming the engine that gave it."""
    return web.json_response(
        {"error": {"message": f"busy: {request.host}", "type": "overloaded"}}, status=503
    )


async def _hangup(request: web.Request) -> web.StreamResponse:
    """The connection closes after the request, before any byte of an answer."""
    await request.read()
    assert request.transport is not None
    request.transport.abort()
    return web.Response()  # never sent


async def _broken_stream(request: web.Request) -> web.StreamResponse:
    """Two events of a stream, then the connection breaks without its end."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for _ in range(2):
        await response.write(b'data: {"choices": [{"text": "x"}]}\n\n')
    await asyncio.sleep(0.05)
    assert request.transport is not None
    request.transport.abort()
    return response


async def _slow(request: web.Request) -> web.StreamResponse:
    await asyncio.sleep(float(request.query.get("s", "3600")))
    return await _ok(request)


BEHAVIOURS = {
    "ok": _ok,
    "stalled-500": _stalled_500,
    "huge-500": _huge_500,
    "reset-500": _reset_500,
    "endless": _endless,
    "slow": _slow,
    "busy-503": _busy_503,
    "hangup": _hangup,
    "broken-stream": _broken_stream,
}


def engine(behaviour: str) -> web.Application:
    """An 'engine' whose every inference route behaves as `behaviour`."""
    app = web.Application(client_max_size=64 * MiB)
    for path in ("/v1/chat/completions", "/v1/completions"):
        app.router.add_post(path, BEHAVIOURS[behaviour])
    return app


async def raw_request(url: str, data: bytes) -> bytes:
    """Send `data` as-is on a fresh connection to `url`'s host; the last response's head and
    body (a 100 Continue before it is skipped), read by its Content-Length."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(data)
        await writer.drain()
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 100"):
                break
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return head + await reader.readexactly(length)
    finally:
        writer.close()


def http_post(path: str, body: bytes, **headers: str) -> bytes:
    """The bytes of an HTTP/1.1 POST, path and headers exactly as given."""
    lines = [f"POST {path} HTTP/1.1", "Host: router", f"Content-Length: {len(body)}",
             "Content-Type: application/json", "Connection: close",
             *(f"{k.replace('_', '-')}: {v}" for k, v in headers.items())]  # fmt: skip
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body
