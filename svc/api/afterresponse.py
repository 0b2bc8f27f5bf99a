"""Work that must follow a response on the wire: run once its last byte has been handed to the
socket (or once it is clear that it never will be).

An event that tells a client an operation is over can reach that client before the
operation's own answer does, on another connection. The docker CLI below API 1.25 removes a
``run --rm`` container itself when it sees ``die`` and stops waiting at ``destroy``: it
cancels its DELETE if ``destroy`` arrives first, and prints ``error removing container:
... context canceled`` (it did for 15 runs in 100 when ``destroy`` went out just before the
204). A view defers such an event with ``after_response``; the ``AfterResponse`` wrapper runs
it after hypercorn has written the final body message, which it does before the ``send``
returns, and, on a unix socket, once the client has read the answer from its socket (at most
``READ_WAIT``; ``svc.api.peerread``). Written but unread is not enough: CI saw the CLI act on a
``destroy`` read on its events connection before it read the 204 that had been written first.
That wait is shielded: hypercorn ends the app (``http.disconnect``) as soon as the answer is
written; a client that goes away ends it too (its closed socket has nothing unread).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio
from quart import request

from svc.api.peerread import until_read
from svc.api.refusals import plain_socket

log = logging.getLogger("svc.api")

SCOPE_KEY = "svc.after_response"
# How long callbacks wait for the client to read the answer (a client that stops reading).
READ_WAIT = 1.0


class AfterResponse:
    """ASGI wrapper: runs the callbacks a view registered once its response has been sent;
    if the response fails or the client goes, when the request ends (they always run)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        pending: list[Callable[[], None]] = []
        scope = {**scope, SCOPE_KEY: pending}

        async def send_then_run(message: dict[str, Any]) -> None:
            last = message.get("type") == "http.response.body" \
                and not message.get("more_body", False)
            try:
                await send(message)
                if last and pending:  # shielded: the answer's end disconnects the app
                    with trio.CancelScope(shield=True):
                        await until_read(_socket(scope), READ_WAIT)
            finally:
                if last:
                    _run(pending)

        try:
            await self.app(scope, receive, send_then_run)
        finally:
            _run(pending)


def after_response(fn: Callable[[], None]) -> None:
    """Run ``fn`` once the current request's response has been sent (see the module)."""
    pending = request.scope.get(SCOPE_KEY)
    if not isinstance(pending, list):  # not behind the wrapper: nothing to wait for
        fn()
        return
    pending.append(fn)


def _socket(scope: dict[str, Any]) -> Any:
    """The request's plain trio socket (None under TLS or outside svc's protocol)."""
    connection = scope.get("extensions", {}).get("svc.hijack", {}).get("connection")
    return None if connection is None else plain_socket(connection.send)


def _run(pending: list[Callable[[], None]]) -> None:
    while pending:
        fn = pending.pop(0)
        try:
            fn()
        except Exception:  # one failing callback never keeps the others from running
            log.exception("a callback after the response failed")
