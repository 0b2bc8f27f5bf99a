"""Plugins by name and kind: found, activated once, and activated again after they die.

``get(name, kind)`` is what a driver lookup asks: the plugin called ``name``, activated
(``Plugin.Activate``, whose ``Implements`` list says which kinds it serves), or an error the
user can act on. Activation retries while the plugin starts (a socket that refuses, a spec
whose address does not answer yet), with pauses of 0.1 s doubling up to 2 s, within the
activation deadline; the engines paused whole seconds.

A call (``Plugin.call``) that finds the plugin gone (its connection refused) forgets the
activation, activates it again (a restarted plugin is taken back) and makes the call once
more; the plugin never saw the first try, so even a create is not made twice. A call whose
connection breaks mid-call fails, and the next call activates the plugin again. Concurrent
callers share one activation. A cancelled caller cancels only its own wait; an activation
it started is finished by whoever waits next.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from svc.errors import SvcError, SystemError_
from svc.plugins.client import (
    CALL_TIMEOUT,
    PluginBadAnswer,
    PluginClient,
    PluginGone,
    PluginUnreachable,
)
from svc.plugins.discovery import Discovery, PluginSpec

log = logging.getLogger("svc.plugins")

RETRY_FIRST, RETRY_MAX = 0.1, 2.0


class NotImplementing(SystemError_):
    """The plugin is there but does not serve this kind (the engines' words first)."""

    def __init__(self, name: str, kind: str, implements: list[str]) -> None:
        super().__init__(f"Plugin does not implement the requested driver: {name} "
                         f"implements {', '.join(implements) or 'nothing'}, not {kind}")
        self.name, self.kind = name, kind


@dataclass
class Plugin:
    """An activated plugin: its spec, client and what it implements."""

    spec: PluginSpec
    client: PluginClient
    implements: list[str]
    manager: PluginManager = field(repr=False)

    @property
    def name(self) -> str:
        return self.spec.name

    async def call(self, method: str, args: Any = None, *,
                   timeout: float | None = None, retry: bool = True) -> dict[str, Any]:
        """``method`` on this plugin, or on its new activation if it died since. A refused
        connection (the plugin never saw the call) is tried once more after activating it
        again (without waiting for a plugin that is starting, unless ``retry``); a
        connection that broke mid-call is not (the plugin may have acted), but the next call
        activates it again."""
        current = await self.manager.current(self)
        try:
            return await current.client.call(method, args, timeout=timeout)
        except PluginUnreachable:
            current = await self.manager.reactivate(current, retry=retry)
        except PluginGone:
            await self.manager.forget(current)
            raise
        return await current.client.call(method, args, timeout=timeout)


class PluginManager:
    def __init__(self, discovery: Discovery | None = None, *,
                 timeout: float = CALL_TIMEOUT,
                 client: Callable[[PluginSpec, float], PluginClient] | None = None) -> None:
        self.discovery = discovery or Discovery()
        self.timeout = timeout
        self._client = client or (lambda spec, t: PluginClient(spec, timeout=t))
        self._active: dict[str, Plugin] = {}
        self._activating: dict[str, trio.Event] = {}

    def activated(self, kind: str) -> list[str]:
        """Names of the activated plugins that implement ``kind`` (for /info)."""
        return sorted(n for n, p in self._active.items() if kind in p.implements)

    async def get(self, name: str, kind: str, *, retry: bool = True) -> Plugin:
        """The plugin ``name``, activated and implementing ``kind``; without ``retry``, a
        plugin that does not answer fails at once instead of being waited for while it
        starts (an authorization plugin: the request it holds up is denied).

        Raises:
            PluginNotFound: no socket or spec file has that name.
            NotImplementing: it does not serve ``kind``.
            PluginUnreachable, PluginTimeout, PluginCallError: it could not be activated.
        """
        plugin = await self._activated(name, retry=retry)
        if kind not in plugin.implements:
            raise NotImplementing(name, kind, plugin.implements)
        return plugin

    async def get_all(self, kind: str, failed: dict[str, str] | None = None) -> list[Plugin]:
        """Every plugin that can be found and implements ``kind`` (``volume ls`` asks all
        volume drivers). One that cannot be activated now is logged and left out, without
        the retries a named lookup waits for, as the engines' GetAll did; ``failed`` (if
        given) gets its name and why."""
        names = await trio.to_thread.run_sync(self.discovery.scan)
        found: list[Plugin] = []

        async def one(name: str) -> None:
            try:
                plugin = self._active.get(name) or await self._activated(name, retry=False)
            except SvcError as exc:  # not found now, a bad spec file, not answering
                log.warning("plugin %s left out: %s", name, exc)
                if failed is not None:
                    failed[name] = str(exc)
                return
            if kind in plugin.implements:
                found.append(plugin)

        async with trio.open_nursery() as nursery:
            for name in names:
                nursery.start_soon(one, name)
        return sorted(found, key=lambda p: p.name)

    async def current(self, plugin: Plugin) -> Plugin:
        """``plugin`` if it is still the active one, else its name's activation now."""
        if self._active.get(plugin.name) is plugin:
            return plugin
        return await self._activated(plugin.name)

    async def forget(self, gone: Plugin) -> None:
        """``gone`` died: its next use activates it again."""
        if self._active.get(gone.name) is gone:
            del self._active[gone.name]
            log.warning("plugin %s went away; it is activated again at its next use",
                        gone.name)
            await gone.client.aclose()

    async def reactivate(self, gone: Plugin, *, retry: bool = True) -> Plugin:
        """``gone``'s connection was refused: forget it and activate it afresh."""
        await self.forget(gone)
        return await self._activated(gone.name, retry=retry)

    async def aclose(self) -> None:
        for plugin in list(self._active.values()):
            await plugin.client.aclose()
        self._active.clear()

    async def _activated(self, name: str, *, retry: bool = True) -> Plugin:
        while True:
            plugin = self._active.get(name)
            if plugin is not None:
                return plugin
            busy = self._activating.get(name)
            if busy is None:
                break
            await busy.wait()  # another caller is activating it; then look again
        done = self._activating[name] = trio.Event()
        try:
            plugin = await self._activate(name, retry=retry)
            self._active[name] = plugin
            return plugin
        finally:
            del self._activating[name]
            done.set()

    async def _activate(self, name: str, *, retry: bool) -> Plugin:
        """Look ``name`` up and handshake, retrying what a starting plugin fails with
        within the deadline."""
        delay = RETRY_FIRST
        deadline = trio.current_time() + self.timeout
        while True:
            try:
                spec = await trio.to_thread.run_sync(self.discovery.lookup, name)
                client = self._client(spec, self.timeout)
                try:
                    answer = await client.call("Plugin.Activate",
                                               timeout=deadline - trio.current_time())
                except BaseException:
                    await client.aclose()
                    raise
                implements = answer.get("Implements") or []
                if not isinstance(implements, list):
                    await client.aclose()
                    raise PluginBadAnswer(f"Plugin.Activate: plugin {name} answered "
                                          f"Implements={implements!r}, not a list")
                log.info("plugin %s activated at %s: %s", name, spec.addr,
                         ", ".join(map(str, implements)) or "nothing")
                return Plugin(spec, client, [str(i) for i in implements], self)
            except PluginUnreachable as exc:  # (a name nothing has fails at once)
                if not retry or trio.current_time() + delay >= deadline:
                    raise
                log.info("plugin %s: %s; trying again in %.1fs", name, exc, delay)
                await trio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)
