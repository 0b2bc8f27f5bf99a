"""One HTTP GET into a fresh local file, bounded in size (and time): ADD <url> and the
``remote=`` contexts both fetch this way, each naming its failures in its own words."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from svc.lazy import lazy_module

if TYPE_CHECKING:
    import httpx
else:
    httpx = lazy_module("httpx")


async def fetch_to(url: str, dest: Path, *, limit: int, fail: Callable[[str], Exception],
                   io_timeout: float = 60.0, deadline: float | None = None) -> None:
    """GET ``url`` into ``dest`` (created here), following redirects.

    Raises ``fail(message)`` for a status other than 200, a body over ``limit`` bytes, a
    transport error, or (with ``deadline``) a transfer longer than that many seconds.
    Cancellation: the connection is closed; ``dest`` may hold part of the body (the caller's
    build directory is removed with the build).
    """
    size = 0
    try:
        with trio.fail_after(deadline if deadline is not None else float("inf")):
            async with httpx.AsyncClient(follow_redirects=True, timeout=io_timeout) as client, \
                    client.stream("GET", url) as r:
                if r.status_code != 200:
                    raise fail(f"{url}: HTTP {r.status_code}")
                with open(dest, "wb") as f:  # noqa: ASYNC230 - small writes into a fresh file
                    async for chunk in r.aiter_bytes():
                        size += len(chunk)
                        if size > limit:
                            raise fail(f"{url} is larger than {limit >> 30} GiB")
                        f.write(chunk)
    except httpx.HTTPError as exc:
        raise fail(f"cannot download {url}: {exc}") from None
    except trio.TooSlowError:
        raise fail(f"{url} took more than {deadline:g} s") from None
