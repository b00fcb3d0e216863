"""Where bodies are parsed: on the event loop when that is cheap, in a worker process when not.

I/O (a process pool). Summarizing costs time per JSON value rather than per byte: long strings
take ~5 ms per MiB, but many tiny messages ~5 µs each (~175 ms per MiB, `kvpin bench router`),
and no JSON parser releases the GIL while it builds Python objects, so a thread would not
help. A body larger than `inline_bytes`, or with more than `inline_objects` opening braces
(counted in C at memory speed; braces inside strings only make a body look denser than it is),
is summarized in a worker process instead, and only the small Summary comes back: the loop
stalls for at most a few milliseconds on any body. Everything else is summarized inline.
`workers=0` parses everything inline (and says so in the log at start).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import multiprocessing

from kvpin import logs
from kvpin.router import bodies
from kvpin.router.config import ParseSettings

log = logging.getLogger(logs.PROXY)


def is_inline(raw: bytes, settings: ParseSettings) -> bool:
    """Whether parsing `raw` is cheap enough for the event loop."""
    return settings.workers == 0 or (
        len(raw) <= settings.inline_bytes and raw.count(b"{") <= settings.inline_objects
    )


class Parser:
    """Summarizes bodies, inline or in the pool."""

    def __init__(self, settings: ParseSettings) -> None:
        self.settings = settings
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None

    def start(self) -> None:
        if self.settings.workers:
            # spawn, not fork: the router may run watch threads, which a fork would copy mid-step
            self._pool = concurrent.futures.ProcessPoolExecutor(
                self.settings.workers, mp_context=multiprocessing.get_context("spawn")
            )
        else:
            log.info("parsing every body on the event loop (no parse workers)")

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    async def summarize(self, raw: bytes) -> bodies.Summary:
        """The body's Summary; BodyError for a body that cannot be routed."""
        limits = self.settings.limits
        if self._pool is None or is_inline(raw, self.settings):
            return bodies.summarize(raw, limits)
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self._pool, bodies.summarize, raw, limits
            )
        except concurrent.futures.BrokenExecutor:
            # A worker died (killed for memory, say), perhaps of this very body: never parse it
            # here, refuse it and start a fresh pool for the next ones.
            log.warning("a parse worker died; restarting the pool")
            self.close()
            self.start()
            raise bodies.BodyError("the body could not be parsed") from None
