"""The AfterResponse wrapper runs deferred work after the final body message was sent, and
runs it anyway when the response fails."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from svc.api.afterresponse import SCOPE_KEY, AfterResponse


def _app(log: list[str], *, fail: bool = False) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scope[SCOPE_KEY].append(lambda: log.append("callback"))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b"", "more_body": True})
        if fail:
            raise RuntimeError("the view failed mid-way")
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        log.append("app returns")
    return app


async def test_callbacks_follow_the_last_body_message() -> None:
    log: list[str] = []

    async def send(message: dict[str, Any]) -> None:
        await trio.lowlevel.checkpoint()
        log.append(f"{message['type']} more={message.get('more_body')}")

    await AfterResponse(_app(log))({"type": "http"}, None, send)
    assert log == ["http.response.start more=None", "http.response.body more=True",
                   "http.response.body more=False", "callback", "app returns"]


async def test_callbacks_run_when_the_response_fails() -> None:
    log: list[str] = []

    async def send(message: dict[str, Any]) -> None:
        log.append(message["type"])

    with pytest.raises(RuntimeError):
        await AfterResponse(_app(log, fail=True))({"type": "http"}, None, send)
    assert log[-1] == "callback"

    async def gone(message: dict[str, Any]) -> None:
        if message.get("more_body") is False:
            raise trio.BrokenResourceError("the client went")

    log.clear()
    with pytest.raises(trio.BrokenResourceError):
        await AfterResponse(_app(log))({"type": "http"}, None, gone)
    assert log == ["callback"]
