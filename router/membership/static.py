"""Endpoints from a YAML file, reloaded when the file changes.

I/O: the file is polled (its mtime, size and inode) every `interval` seconds, which also
follows the symlink swaps of a mounted ConfigMap. A new version that cannot be used (not UTF-8,
not YAML, a key given twice, an invalid endpoint) is logged and counted, and the router keeps
serving the last good one; the poll goes on whatever happens, so the next good version loads.
Requests in flight are not touched by a reload (see kvpin.router.membership.base).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib
from typing import Any

import yaml

from kvpin import logs
from kvpin.router import config
from kvpin.router.membership.base import Membership

log = logging.getLogger(logs.MEMBERSHIP)


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping key given twice (YAML says keys are unique; PyYAML
    would silently keep the last, hiding an endpoint or a member list)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _UniqueKeyLoader.construct_mapping
)


def load(path: pathlib.Path) -> dict[str, config.EndpointConfig]:
    """Read and validate the file; ConfigError says what is wrong."""
    try:
        doc = yaml.load(path.read_bytes().decode("utf-8"), Loader=_UniqueKeyLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise config.ConfigError(f"{path}: {err}") from err
    return config.parse_static(doc)


class StaticMembership(Membership):
    """Endpoints of a router config file."""

    def __init__(self, path: pathlib.Path, *, interval: float = 1.0) -> None:
        super().__init__()
        self.path = path
        self.interval = interval
        self._seen: tuple[float, int, int] | None = None
        self._task: asyncio.Task[None] | None = None

    def _stamp(self) -> tuple[float, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime, st.st_size, st.st_ino)

    async def start(self) -> None:
        self._seen = self._stamp()
        self.publish(load(self.path))  # a bad file at start-up is fatal, with its message
        self._task = asyncio.get_running_loop().create_task(self._follow())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _follow(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            stamp = self._stamp()
            if stamp is None or stamp == self._seen:
                continue
            self._seen = stamp
            try:
                self.publish(load(self.path))
            except Exception as err:  # a bad file must never stop the reloads
                log.error("ignoring the new %s, still serving the previous one: %s", self.path, err)
                if self.metrics:
                    self.metrics.of(self.metrics.membership_errors, "static").inc()
            else:
                log.info("reloaded %s", self.path)
