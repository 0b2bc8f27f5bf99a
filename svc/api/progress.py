"""JSON progress streams (import, pull, push): the engine's work reports messages into a
bounded channel and the response carries them as they come, one JSON object per line.

Errors before the stream are raised by the view (a status code); once the head is out a
failure is the stream's last line, ``{"error", "errorDetail"}`` with HTTP 200, as dockerd
reports it. A client that goes cancels the work (the stream's nursery is inside the
response's cancel scope).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import trio

from svc.errors import SvcError, as_no_space, unwrap
from svc.models.images import ProgressMessage as Msg

log = logging.getLogger("svc.api.progress")

Work = Callable[[trio.MemorySendChannel[dict[str, Any]]], Awaitable[Any]]


def error_line(message: str, code: int | None = None) -> bytes:
    """The stream's last line on failure; ``code`` (a failed build step's exit code) goes
    into errorDetail as dockerd's JSONError carried it."""
    detail: dict[str, Any] = {"message": message} if code is None \
        else {"code": code, "message": message}
    return Msg(error=message, errorDetail=detail).line()


@trio.as_safe_channel
async def progress_lines(work: Work, what: str,
                         last: Callable[[Any], bytes] | None = None,
                         ) -> AsyncGenerator[bytes, None]:
    """Run ``work(send)`` and yield each message it sends as a line; then ``last(result)``
    (if given), or the failure as the error line."""
    send, recv = trio.open_memory_channel[dict[str, Any]](64)
    outcome: dict[str, Any] = {}

    async def run() -> None:
        async with send:
            try:
                outcome["result"] = await work(send)
            except Exception as exc:  # headers are gone: report in the stream
                cause = as_no_space(exc, f"{what} failed") or unwrap(exc)
                if isinstance(cause, SvcError):
                    outcome["error"] = str(cause)
                    code = getattr(cause, "code", None)
                    if isinstance(code, int):
                        outcome["code"] = code
                else:
                    log.exception("%s failed", what)
                    outcome["error"] = f"{what} failed: {type(cause).__name__}: {cause}"

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        async for msg in recv:
            yield Msg.model_validate(msg).line()
    if "error" in outcome:
        yield error_line(outcome["error"], outcome.get("code"))
    elif last is not None:
        yield last(outcome["result"])
