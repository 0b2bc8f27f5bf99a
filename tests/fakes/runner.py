"""A fake runner for the restore logic: it records teardowns, launches and events."""

from __future__ import annotations

from typing import Any

import trio

from svc.engine.containers.container import Container


class FakeRunner:
    monitor = None  # no live restore: nothing is taken back

    def __init__(self) -> None:
        self.torn_down: list[str] = []
        self.launched: list[str] = []
        self.events: list[tuple[str, str]] = []

    def bind(self, nursery: trio.Nursery) -> None:
        pass

    async def teardown(self, c: Container) -> None:
        self.torn_down.append(c.id)

    async def launch(self, c: Container) -> None:
        self.launched.append(c.id)

    def event(self, c: Container, action: str, **extra: Any) -> None:
        self.events.append((action, c.id))
