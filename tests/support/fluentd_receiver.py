"""A fluentd forward-protocol receiver for the tests (no packaged fluentd here): a TCP
server on 127.0.0.1 (or a unix socket) that decodes every event mode of the Forward Protocol
Specification v1 and records the entries.

* Message mode: ``[tag, time, record]`` or ``[tag, time, record, option]``;
* Forward mode: ``[tag, [[time, record], ...]]`` (``option`` optional);
* PackedForward mode: ``[tag, <bin or str: a msgpack stream of [time, record] entries>]``,
  CompressedPackedForward when ``option["compressed"] == "gzip"``.

``time`` is an integer or an EventTime (ext type 0: 32-bit seconds and nanoseconds, big
endian), recorded as ``(seconds, nanoseconds)``. Strings are decoded as UTF-8 with
``surrogateescape``, so a line's bytes can be compared exactly (``Entry.log_bytes``).
When the option holds ``chunk``, the receiver answers ``{"ack": chunk}`` as ``in_forward``
does. Use it as ``async with fluentd_receiver() as rx:``; it closes with the block.
"""

from __future__ import annotations

import contextlib
import gzip
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import msgpack
import trio


@dataclass(frozen=True)
class EventTime:
    seconds: int
    nanoseconds: int


@dataclass
class Entry:
    tag: str
    time: int | EventTime
    record: dict[str, Any]
    mode: str  # "message", "forward", "packed" or "compressed"
    option: dict[str, Any] | None

    def log_bytes(self) -> bytes:
        return str(self.record["log"]).encode("utf-8", "surrogateescape")


def _ext(code: int, data: bytes) -> Any:
    if code == 0 and len(data) == 8:
        return EventTime(int.from_bytes(data[:4]), int.from_bytes(data[4:]))
    return msgpack.ExtType(code, data)


def _unpacker() -> msgpack.Unpacker:
    return msgpack.Unpacker(raw=False, unicode_errors="surrogateescape", ext_hook=_ext,
                            strict_map_key=False)


def decode_event(obj: Any) -> tuple[list[Entry], Any]:
    """The entries of one top-level array, and the ``chunk`` to ack (or None).

    Raises:
      ValueError: not one of the modes.
    """
    if not isinstance(obj, list) or len(obj) < 2 or not isinstance(obj[0], str):
        raise ValueError(f"not an event: {obj!r:.200}")
    tag, second = obj[0], obj[1]
    if isinstance(second, int | EventTime):  # message mode
        if len(obj) not in (3, 4) or not isinstance(obj[2], dict):
            raise ValueError("message mode needs [tag, time, record(, option)]")
        option = obj[3] if len(obj) == 4 else None
        entries = [[second, obj[2]]]
        mode = "message"
    else:
        if len(obj) not in (2, 3):
            raise ValueError("forward modes need [tag, entries(, option)]")
        option = obj[2] if len(obj) == 3 else None
        if isinstance(second, list):
            entries, mode = second, "forward"
        elif isinstance(second, bytes | str):
            raw = second if isinstance(second, bytes) else second.encode(
                "utf-8", "surrogateescape")
            mode = "packed"
            if isinstance(option, dict) and option.get("compressed") == "gzip":
                raw, mode = gzip.decompress(raw), "compressed"
            unpacker = _unpacker()
            unpacker.feed(raw)
            entries = list(unpacker)
        else:
            raise ValueError(f"unknown entries type {type(second).__name__}")
    if option is not None and not isinstance(option, dict):
        raise ValueError("option is not a map")
    out = []
    for entry in entries:
        if (not isinstance(entry, list) or len(entry) != 2
                or not isinstance(entry[0], int | EventTime) or not isinstance(entry[1], dict)):
            raise ValueError(f"bad entry {entry!r:.200}")
        out.append(Entry(tag, entry[0], entry[1], mode, option))
    return out, (option or {}).get("chunk")


class FluentdReceiver:
    """What arrived: ``entries`` in order, ``errors``, and ``connections`` accepted."""

    def __init__(self, unix_path: str | None = None) -> None:
        self.entries: list[Entry] = []
        self.errors: list[str] = []
        self.connections = 0
        self.port = 0
        self.unix_path = unix_path
        self._nursery: trio.Nursery | None = None
        self._scope: trio.CancelScope | None = None

    @property
    def address(self) -> str:
        return f"unix://{self.unix_path}" if self.unix_path else f"127.0.0.1:{self.port}"

    async def wait_for(self, n: int, timeout: float = 10.0) -> list[Entry]:
        with trio.fail_after(timeout):
            while len(self.entries) < n:
                await trio.sleep(0.01)
        return self.entries

    async def start(self) -> None:
        """Listen (a free port the first time, the same one after ``stop``)."""
        assert self._nursery is not None
        if self.unix_path:
            sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
            await sock.bind(self.unix_path)
            sock.listen(16)
            listeners: list[trio.SocketListener] = [trio.SocketListener(sock)]
        else:
            listeners = await trio.open_tcp_listeners(self.port, host="127.0.0.1")
            self.port = listeners[0].socket.getsockname()[1]
        self._scope = scope = trio.CancelScope()

        async def serve() -> None:
            with scope:
                try:
                    await trio.serve_listeners(self._serve, listeners)
                finally:
                    for listener in listeners:
                        await trio.aclose_forcefully(listener)

        self._nursery.start_soon(serve)

    async def stop(self) -> None:
        """Close the listener and every connection (as a stopped fluentd does)."""
        if self._scope is not None:
            self._scope.cancel()
            self._scope = None
        await trio.sleep(0.05)
        if self.unix_path:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.unix_path)

    async def _serve(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        unpacker = _unpacker()
        async with stream:
            while data := await stream.receive_some(65536):
                unpacker.feed(data)
                for obj in unpacker:
                    try:
                        entries, chunk = decode_event(obj)
                    except ValueError as exc:
                        self.errors.append(str(exc))
                        continue
                    self.entries.extend(entries)
                    if chunk is not None:
                        await stream.send_all(msgpack.packb({"ack": chunk}))


@asynccontextmanager
async def fluentd_receiver(unix_path: str | None = None) -> AsyncIterator[FluentdReceiver]:
    """A listening receiver; its tasks and sockets end with the block."""
    rx = FluentdReceiver(unix_path)
    async with trio.open_nursery() as nursery:
        rx._nursery = nursery
        await rx.start()
        try:
            yield rx
        finally:
            nursery.cancel_scope.cancel()


def unpack_all(data: bytes) -> list[Any]:
    """Every top-level object of a msgpack stream (for checking bytes the driver wrote)."""
    unpacker = _unpacker()
    unpacker.feed(data)
    return list(unpacker)
