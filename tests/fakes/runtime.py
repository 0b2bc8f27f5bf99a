"""A fake OCI runtime: containers in a dict, every call recorded. For unit tests of the engine
that need no runc (restore, the state machine, restart policies)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from svc.runtime.protocol import ContainerNotFound, ContainerStateConflict


class FakeRuntime:
    """Implements ``svc.runtime.protocol.Runtime`` for the calls the tests make; others
    raise NotImplementedError."""

    def __init__(self, states: dict[str, str] | None = None) -> None:
        self.states = dict(states or {})  # id -> "created", "running", "paused", "stopped"
        self.calls: list[tuple[str, str]] = []

    async def create(self, container_id: str, bundle: Path, **kw: Any) -> Any:
        raise NotImplementedError

    async def start(self, container_id: str) -> None:
        raise NotImplementedError

    async def exec(self, container_id: str, process: dict[str, Any], **kw: Any) -> Any:
        raise NotImplementedError

    async def kill(self, container_id: str, sig: int = signal.SIGTERM, *,
                   all: bool = False) -> None:
        self.calls.append(("kill", container_id))
        if self.states.get(container_id) not in ("running", "paused", "created"):
            raise ContainerStateConflict("container not running")

    async def pause(self, container_id: str) -> None:
        self.calls.append(("pause", container_id))

    async def resume(self, container_id: str) -> None:
        self.calls.append(("resume", container_id))

    async def update(self, container_id: str, resources: dict[str, Any]) -> None:
        self.calls.append(("update", container_id))

    async def delete(self, container_id: str, *, force: bool = False) -> None:
        self.calls.append(("delete", container_id))
        self.states.pop(container_id, None)

    def has_state(self, container_id: str) -> bool:
        return container_id in self.states

    async def state(self, container_id: str) -> dict[str, Any]:
        self.calls.append(("state", container_id))
        if container_id not in self.states:
            raise ContainerNotFound(f"container {container_id} does not exist")
        return {"id": container_id, "status": self.states[container_id]}

    async def list(self) -> list[dict[str, Any]]:
        return [{"id": cid, "status": st} for cid, st in self.states.items()]
