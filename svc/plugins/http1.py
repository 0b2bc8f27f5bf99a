"""HTTP/1.1 for plugin calls: h11 over trio streams, with a small pool of kept-alive
connections per plugin.

A plugin call is one small POST and one small answer; a general client (httpx) spent about
1.4 ms of CPU on each, which an authorization plugin pays twice per API request. This one
does only what the protocol needs: open a unix or TCP connection (TLS for ``https``), write
the request, read the whole answer up to a bound, and keep the connection for the next call
if both sides ended their message cleanly.

Failure kinds matter to the caller (``svc.plugins.client``): ``ConnectFailed`` means the
plugin never saw the request (safe to try again); ``Broken`` means the connection failed
after the request went out. A kept connection the plugin closed while idle (it restarted, or
timed out the connection) is noticed before it is used, by its socket being readable, and
thrown away, so such a close is never taken for a failure mid-call.

Cancellation: a call cancelled at any point closes its connection (it is not returned to the
pool with half a message on it); nothing else is left behind.
"""

from __future__ import annotations

import select
import ssl
from dataclasses import dataclass

import h11
import trio

READ_SIZE = 65536
KEEP_IDLE = 4  # connections kept per plugin
CUT = "the plugin closed the connection before its answer ended"


class ConnectFailed(Exception):
    """No connection could be made: nothing was sent."""


class Broken(Exception):
    """The connection failed or closed after the request was (partly) sent."""


class TooLarge(Exception):
    """The answer is longer than the caller's bound."""


@dataclass(frozen=True)
class Target:
    """Where a plugin listens: a unix socket path, or a host and port (with TLS or not)."""

    unix: str = ""
    host: str = ""
    port: int = 0
    tls: ssl.SSLContext | None = None

    @property
    def host_header(self) -> str:
        return "plugin" if self.unix else f"{self.host}:{self.port}"


class _Conn:
    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.h11 = h11.Connection(h11.CLIENT)

    def fileno(self) -> int:
        s = self.stream
        if isinstance(s, trio.SSLStream):
            s = s.transport_stream
        assert isinstance(s, trio.SocketStream)
        return s.socket.fileno()

    def idle_closed(self) -> bool:
        """Readable while idle: the plugin closed it (or sent what it should not have)."""
        try:
            ready, _, _ = select.select([self.fileno()], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(ready)

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(self.stream)


class Pool:
    """Kept-alive connections to one plugin, each used by one call at a time."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._idle: list[_Conn] = []
        self._closed = False

    async def post(self, path: str, body: bytes, headers: list[tuple[str, str]],
                   limit: int) -> tuple[int, bytes]:
        """``POST path`` with ``body``; the status and the whole answer's body.

        Raises:
            ConnectFailed, Broken, TooLarge: see the module.
        """
        conn = await self._take()
        done = False
        try:
            status, data = await self._exchange(conn, path, body, headers, limit)
            done = True
        finally:
            if done and self._reusable(conn):
                conn.h11.start_next_cycle()
                self._idle.append(conn)
            else:
                await conn.aclose()
        return status, data

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.aclose()

    def _reusable(self, conn: _Conn) -> bool:
        return (not self._closed and len(self._idle) < KEEP_IDLE
                and conn.h11.our_state is h11.DONE and conn.h11.their_state is h11.DONE)

    async def _take(self) -> _Conn:
        while self._idle:
            conn = self._idle.pop()
            if not conn.idle_closed():
                return conn
            await conn.aclose()
        try:
            return _Conn(await self._open())
        except (OSError, trio.BrokenResourceError, ssl.SSLError) as exc:
            raise ConnectFailed(str(exc) or type(exc).__name__) from None

    async def _open(self) -> trio.abc.Stream:
        t = self.target
        if t.unix:
            return await trio.open_unix_socket(t.unix)
        stream: trio.abc.Stream = await trio.open_tcp_stream(t.host, t.port)
        if t.tls is not None:
            tls = trio.SSLStream(stream, t.tls, server_hostname=t.host)
            try:
                await tls.do_handshake()
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
            stream = tls
        return stream

    async def _exchange(self, conn: _Conn, path: str, body: bytes,
                        headers: list[tuple[str, str]], limit: int) -> tuple[int, bytes]:
        c = conn.h11
        eof = False
        try:
            events: list[h11.Event] = [h11.Request(method="POST", target=path, headers=[
                ("Host", self.target.host_header), *headers,
                ("Content-Length", str(len(body)))])]
            events += [h11.Data(data=body)] if body else []
            await conn.stream.send_all(b"".join(c.send(e) or b"" for e in
                                                [*events, h11.EndOfMessage()]))
            status, chunks, size = 0, [], 0
            while True:
                event = c.next_event()
                if event is h11.NEED_DATA:
                    data = bytes(await conn.stream.receive_some(READ_SIZE))
                    eof = not data
                    c.receive_data(data)
                elif isinstance(event, h11.Response):
                    status = event.status_code
                elif isinstance(event, h11.Data):
                    size += len(event.data)
                    if size > limit:
                        raise TooLarge(str(limit))
                    chunks.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    return status, b"".join(chunks)
                elif isinstance(event, h11.ConnectionClosed):
                    raise Broken(CUT)
        except h11.RemoteProtocolError as exc:
            if eof:
                raise Broken(CUT) from None
            raise Broken(f"not an HTTP answer: {exc}") from None
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError,
                ssl.SSLError) as exc:
            raise Broken(str(exc) or type(exc).__name__) from None
