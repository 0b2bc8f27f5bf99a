"""A GELF receiver for the tests (no packaged Graylog here): UDP and TCP inputs on 127.0.0.1
that take messages as a Graylog GELF input does and record what they decoded.

UDP: a datagram starting ``0x1e 0x0f`` is a chunk (8-byte id, sequence number, count); a
count over 128 or a sequence number past the count is refused, and the chunks of one id are
joined in sequence order once all have come. A payload starting ``0x1f 0x8b`` is gzip, one
starting ``0x78`` with a valid zlib header check is zlib, one starting ``{`` is plain JSON.
TCP: frames end with a null byte, uncompressed. Each JSON document is then checked as
Graylog's ``GelfCodec`` does: an object with a non-empty ``short_message`` and ``host``, a
numeric ``timestamp`` and ``level`` if present, additional field names matching
``^[\\w.-]*$`` and no ``_id``. Refused input goes to ``errors``, never to ``messages``.

Use it as ``async with gelf_receiver() as rx:``: its tasks and sockets end with the block.
"""

from __future__ import annotations

import gzip
import json
import re
import socket
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trio

MAX_CHUNKS = 128
_FIELD = re.compile(r"^[\w.-]*$")


@dataclass
class Chunked:
    count: int
    parts: dict[int, bytes] = field(default_factory=dict)


class GelfReceiver:
    """What arrived (``messages``, decoded; ``errors``; chunk counts per message id)."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.datagrams = 0
        self.chunk_counts: list[int] = []  # per reassembled message: its chunk count
        self.kinds: list[str] = []  # per message: "gzip", "zlib" or "json"
        self.udp_port = 0
        self.tcp_port = 0
        self._pending: dict[bytes, Chunked] = {}
        self._nursery: trio.Nursery | None = None
        self._tcp_scope: trio.CancelScope | None = None

    @property
    def udp_address(self) -> str:
        return f"udp://127.0.0.1:{self.udp_port}"

    @property
    def tcp_address(self) -> str:
        return f"tcp://127.0.0.1:{self.tcp_port}"

    async def wait_for(self, n: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Wait until ``n`` messages have arrived (fails the test after ``timeout``)."""
        with trio.fail_after(timeout):
            while len(self.messages) < n:
                await trio.sleep(0.01)
        return self.messages

    # UDP -------------------------------------------------------------------------------

    async def _serve_udp(self, sock: trio.socket.SocketType) -> None:
        while True:
            data = await sock.recv(65536)
            self.datagrams += 1
            self.take_datagram(data)

    def take_datagram(self, data: bytes) -> None:
        if data[:2] != b"\x1e\x0f":
            self._decode(data, compressed=True)
            return
        if len(data) < 12:
            self.errors.append("short chunk")
            return
        msg_id, seq, count = data[2:10], data[10], data[11]
        if count > MAX_CHUNKS or seq >= count:
            self.errors.append(f"chunk {seq}/{count} refused")
            return
        entry = self._pending.setdefault(msg_id, Chunked(count))
        if entry.count != count:
            self.errors.append("chunk count changed")
            return
        entry.parts[seq] = data[12:]
        if len(entry.parts) == count:
            del self._pending[msg_id]
            self.chunk_counts.append(count)
            self._decode(b"".join(entry.parts[i] for i in range(count)), compressed=True)

    # TCP -------------------------------------------------------------------------------

    async def start_tcp(self) -> None:
        """Listen on ``tcp_port`` (a free port the first time, the same one after a stop)."""
        assert self._nursery is not None
        listeners = await trio.open_tcp_listeners(self.tcp_port, host="127.0.0.1")
        self.tcp_port = listeners[0].socket.getsockname()[1]
        self._tcp_scope = scope = trio.CancelScope()

        async def serve() -> None:
            with scope:
                try:
                    await trio.serve_listeners(self._serve_tcp, listeners)
                finally:
                    for listener in listeners:
                        await trio.aclose_forcefully(listener)

        self._nursery.start_soon(serve)

    async def stop_tcp(self) -> None:
        """Close the listener and every connection (as a stopped Graylog does)."""
        if self._tcp_scope is not None:
            self._tcp_scope.cancel()
            self._tcp_scope = None
        await trio.sleep(0.05)  # let the cancelled tasks close their sockets

    async def _serve_tcp(self, stream: trio.SocketStream) -> None:
        buf = b""
        async with stream:
            while data := await stream.receive_some(65536):
                buf += data
                *frames, buf = buf.split(b"\0")
                for frame in frames:
                    self._decode(frame, compressed=False)

    # Decoding --------------------------------------------------------------------------

    def _decode(self, payload: bytes, *, compressed: bool) -> None:
        kind = "json"
        try:
            if compressed and payload[:2] == b"\x1f\x8b":
                payload, kind = gzip.decompress(payload), "gzip"
            elif compressed and payload[:1] == b"x" and int.from_bytes(payload[:2]) % 31 == 0:
                payload, kind = zlib.decompress(payload), "zlib"
            elif payload[:1] != b"{":
                raise ValueError(f"unknown payload type {payload[:2]!r}")
            doc = json.loads(payload)
            check(doc)
        except (ValueError, OSError, zlib.error) as exc:
            self.errors.append(str(exc))
            return
        self.messages.append(doc)
        self.kinds.append(kind)


def check(doc: Any) -> None:
    """Graylog's checks of a GELF document (ValueError with its reason)."""
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    for key in ("short_message", "host"):
        if not isinstance(doc.get(key), str) or not doc[key].strip():
            raise ValueError(f"{key} is missing or empty")
    for key in ("timestamp", "level"):
        if key in doc and not isinstance(doc[key], int | float):
            raise ValueError(f"{key} is not a number")
    for key in doc:
        if key.startswith("_") and (key == "_id" or not _FIELD.match(key)):
            raise ValueError(f"invalid additional field {key!r}")


@asynccontextmanager
async def gelf_receiver() -> AsyncIterator[GelfReceiver]:
    """A receiver with its UDP and TCP inputs listening; all closed at the block's end."""
    rx = GelfReceiver()
    udp = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with udp:
        # A 100 KB line is 70-odd datagrams: room for them while the test's task runs.
        udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        await udp.bind(("127.0.0.1", 0))
        rx.udp_port = udp.getsockname()[1]
        async with trio.open_nursery() as nursery:
            rx._nursery = nursery
            nursery.start_soon(rx._serve_udp, udp)
            await rx.start_tcp()
            try:
                yield rx
            finally:
                nursery.cancel_scope.cancel()
