"""How a router gets its backend: ``create_app`` calls the router's ``register(app, backend)``,
which keeps the backend in the router's ``Wired`` slot and registers its blueprint. Views read
the slot; nothing looks the engine up from the application context."""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class Wired(Generic[T]):
    """One router's backend, set once by ``register``."""

    def __init__(self, router: str) -> None:
        self.router = router
        self._backend: T | None = None

    def set(self, backend: T) -> None:
        self._backend = backend

    def get(self) -> T:
        if self._backend is None:
            raise RuntimeError(f"the {self.router} routes are used before register()")
        return self._backend
