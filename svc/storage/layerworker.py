"""The helper thread beside a layer apply or produce: sha256 and skeleton compression.

They run off the calling thread, so they overlap its system calls and Python work (hashlib and
zlib release the GIL).

Reading the input stays in the calling thread: the engine's request streams may only be read
from the thread the engine started (they call back into trio).
"""

from __future__ import annotations

import hashlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T")


class Worker:
    """Runs jobs in order in a helper thread, so hashing and compressing overlap system calls.

    At most 8 jobs wait (their arguments are the memory bound: 1 MiB chunks at most). After a
    job raises, the rest are dropped; its exception is raised by the next ``submit`` or ``close``.
    """

    def __init__(self, name: str) -> None:
        self._queue: queue.Queue[tuple[Callable[[Any], object], object] | None] = \
            queue.Queue(maxsize=8)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (job := self._queue.get()) is not None:
            if self._error is None:
                try:
                    job[0](job[1])
                except BaseException as exc:  # handed to the caller's thread
                    self._error = exc

    def submit(self, job: Callable[[_T], object], arg: _T) -> None:
        """Queue ``job(arg)``; ``arg`` must not change afterwards."""
        if self._error is not None:
            raise self._error
        self._queue.put((job, arg))

    def close(self, *, check: bool = True) -> None:
        """Run what is queued and stop the thread (idempotent); ``check``: raise a job's error."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        if check and self._error is not None:
            raise self._error


class Hasher:
    """sha256 of everything given to ``update``, computed in a ``Worker``'s thread."""

    def __init__(self, worker: Worker) -> None:
        self._hash = hashlib.sha256()
        self._worker = worker

    def update(self, chunk: bytes | memoryview) -> None:
        """Hash ``chunk`` (bytes, or a view of bytes: it must never change)."""
        self._worker.submit(self._hash.update, chunk)

    def hexdigest(self) -> str:
        """The digest; only once the worker is closed."""
        return self._hash.hexdigest()
