"""Small trio servers for what a real registry will not do on demand: a byte-counting TCP
proxy, and a fake registry that lies about digests or serves an endless blob."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import trio

Body = bytes | Callable[[], AsyncIterator[bytes]]
Answer = tuple[int, dict[str, str], Body]  # status, headers, body
Route = Callable[[str, str, dict[str, str]], Awaitable[Answer]]


async def _listen(nursery: trio.Nursery, handler: Callable[[trio.SocketStream],
                                                              Awaitable[None]]) -> int:
    listeners = await nursery.start(trio.serve_tcp, handler, 0)
    return int(listeners[0].socket.getsockname()[1])


_REQUEST_LINE = re.compile(rb"(GET|HEAD|POST|PUT|PATCH|DELETE) (\S+) HTTP/1\.1\r\n")


@dataclass
class CountingProxy:
    """Forwards 127.0.0.1:<port> to ``upstream``, counts the bytes sent back and notes the
    request lines sent up; ``delay`` seconds after each chunk sent back throttle it."""

    upstream: int
    downstream_bytes: int = 0
    port: int = 0
    delay: float = 0.0
    requests: list[str] = field(default_factory=list)

    def blob_gets(self, digest: str) -> int:
        return sum(1 for r in self.requests if r.startswith("GET ") and
                   r.endswith(f"/blobs/{digest}"))

    async def start(self, nursery: trio.Nursery) -> CountingProxy:
        self.port = await _listen(nursery, self._serve)
        return self

    async def _serve(self, client: trio.SocketStream) -> None:
        async with client, await trio.open_tcp_stream("127.0.0.1", self.upstream) as server:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._pump, client, server, False, nursery.cancel_scope)
                nursery.start_soon(self._pump, server, client, True, nursery.cancel_scope)

    async def _pump(self, src: trio.SocketStream, dst: trio.SocketStream, count: bool,
                    scope: trio.CancelScope) -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            while data := await src.receive_some(65536):
                if count:
                    self.downstream_bytes += len(data)
                else:
                    self.requests += [f"{m[1].decode()} {m[2].decode()}"
                                      for m in _REQUEST_LINE.finditer(data)]
                await dst.send_all(data)
                if count and self.delay:
                    await trio.sleep(self.delay)
        scope.cancel()


@dataclass
class FakeRegistry:
    """An HTTP/1.1 server answering ``GET /v2/`` with 200 and everything else via ``route``.
    ``closed`` is set when a body could not be sent because the client went away."""

    route: Route
    port: int = 0
    closed: trio.Event = field(default_factory=trio.Event)

    async def start(self, nursery: trio.Nursery) -> FakeRegistry:
        self.port = await _listen(nursery, self._serve)
        return self

    @property
    def domain(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _serve(self, stream: trio.SocketStream) -> None:
        buffer = b""
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = await stream.receive_some(65536)
                    if not data or data.startswith(b"\x16"):  # TLS hello: hang up, as Go
                        return
                    buffer += data
                head, buffer = buffer.split(b"\r\n\r\n", 1)
                lines = head.decode("latin-1").split("\r\n")
                method, target, version = lines[0].split(" ")
                if not version.startswith("HTTP/1"):
                    return
                headers = {k.strip().lower(): v.strip()
                           for k, _, v in (line.partition(":") for line in lines[1:])}
                if target == "/v2/":
                    status, extra, body = 200, {"Content-Length": "2"}, b"{}"
                else:
                    status, extra, body = await self.route(method, target, headers)
                out = f"HTTP/1.1 {status} X\r\n" + "".join(f"{k}: {v}\r\n"
                                                           for k, v in extra.items())
                await stream.send_all(out.encode() + b"\r\n")
                if method == "HEAD":
                    continue
                if isinstance(body, bytes):
                    await stream.send_all(body)
                else:
                    async for chunk in body():
                        await stream.send_all(chunk)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.closed.set()
        finally:
            await stream.aclose()
