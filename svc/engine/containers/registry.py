"""The containers the daemon knows, by id and by name: the one place that resolves a
reference and hands out names. Shared by the containers service and its collaborators
(networking, volumes, restore), which take it in their constructors."""

from __future__ import annotations

from collections.abc import Iterable

import trio

from svc.engine.containers import names as namegen
from svc.engine.containers.container import Container, new_id
from svc.engine.containers.state import State
from svc.errors import Conflict, InvalidParameter, NotFound


class ContainerRegistry:
    def __init__(self) -> None:
        self.containers: dict[str, Container] = {}
        self.names: dict[str, str] = {}  # "/name" -> id
        self.names_lock = trio.Lock()  # held while a name is checked and taken

    def resolve(self, ref: str) -> Container:
        """By full id, name (with or without "/") or unique id prefix; 404 / 400 ambiguous."""
        if not ref:
            raise NotFound("No such container: ")
        c = self.containers.get(ref)
        if c is not None:
            return c
        by_name = self.names.get("/" + ref.lstrip("/"))
        if by_name is not None:
            return self.containers[by_name]
        matches = [c for cid, c in self.containers.items() if cid.startswith(ref)]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise InvalidParameter(f"multiple IDs found with provided prefix: {ref}")
        raise NotFound(f"No such container: {ref}")

    def name_taken(self, name: str) -> Conflict:
        return Conflict(f'Conflict. The name "{name}" is already in use by container '
                        f"{self.names[name]}. You have to remove (or rename) that container to "
                        "be able to reuse that name.")

    def new_name(self) -> str:
        """A generated name no container has (``adjective_surname``, as dockerd's)."""
        for attempt in range(10):
            name = "/" + namegen.generate(attempt)
            if name not in self.names:
                return name
        return "/" + new_id()[:12]

    def add(self, c: Container) -> None:
        self.containers[c.id] = c
        self.names[c.name] = c.id

    def forget(self, c: Container) -> None:
        self.containers.pop(c.id, None)
        if self.names.get(c.name) == c.id:
            del self.names[c.name]

    def all(self) -> Iterable[Container]:
        return self.containers.values()

    def image_use(self, image_id: str) -> tuple[str, bool] | None:
        """A container of image ``image_id`` (a running one if any), and whether it runs: what
        an image removal is refused for."""
        found: tuple[str, bool] | None = None
        for c in self.containers.values():
            if c.image_id == image_id:
                running = c.state.status in (State.RUNNING, State.PAUSED, State.RESTARTING)
                if found is None or running:
                    found = (c.id, running)
        return found
