"""Long-lived background tasks that never take the daemon down.

A task that runs for the daemon's lifetime (the orphan reaper, the stats collector, the memory
scavenger) sits in a nursery beside the HTTP server: an exception escaping it would cancel
that nursery and end the daemon. Such failures are ordinary (``EMFILE`` opening a ``/proc``
file while descriptors are short, ``ENOSPC`` writing a file): ``keep_running`` logs each one
and starts the task again after a pause that doubles up to ``MAX_PAUSE``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

log = logging.getLogger("svc.background")

MIN_PAUSE = 0.5
MAX_PAUSE = 30.0


async def keep_running(name: str, fn: Callable[..., Awaitable[Any]], *args: Any,
                       task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Run ``fn(*args)`` until it returns or is cancelled, starting it again after each
    exception (logged). ``fn`` takes a ``task_status``: the first run is started with
    ``nursery.start``, and a failure before it reports started is raised (the daemon's start
    reports it); later runs are started without waiting.

    Cancellation: cancels ``fn`` where it is; nothing else is left behind.
    """
    started = False
    pause = MIN_PAUSE
    while True:
        try:
            async with trio.open_nursery() as nursery:
                if started:
                    nursery.start_soon(fn, *args)
                else:
                    await nursery.start(fn, *args)
                    started = True
                    task_status.started()
            return
        except Exception as exc:
            if not started:
                raise
            cause: BaseException = exc
            while isinstance(cause, BaseExceptionGroup) and len(cause.exceptions) == 1:
                cause = cause.exceptions[0]  # the nursery's group of one
            if isinstance(cause, OSError):  # an ordinary condition (EMFILE, ENOSPC): a line
                log.error("the background task %s failed: %s; starting it again in %.1f s",
                          name, cause, pause)
            else:  # a bug: with its traceback
                log.exception("the background task %s failed; starting it again in %.1f s",
                              name, pause)
        await trio.sleep(pause)
        pause = min(pause * 2, MAX_PAUSE)
