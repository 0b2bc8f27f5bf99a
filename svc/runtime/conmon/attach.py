"""A container's stdin (and, with a TTY, its window size) through conmon: its attach socket
(``SOCK_SEQPACKET``) takes stdin as raw packets, and its ``ctl`` fifo takes a resize as
``1 <height> <width>\\n``.

The daemon reads its output from conmon's log (``logtail``), not from this socket; conmon
writes the output to every attached socket too (a byte naming the stream, then the bytes), so
``discard_output`` reads and drops it, lest conmon's writes to a full socket fail.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

import trio

PACKET = 8192  # conmon reads stdin in packets of this size at most


class MonitorInput:
    """The daemon's connection to a container's conmon, for its stdin (a trio-stream-like
    ``send_all``/``aclose``)."""

    def __init__(self, sock: trio.socket.SocketType, raw: socket.socket, ctl: Path) -> None:
        self._sock = sock
        self._raw = raw  # the same socket, non-blocking: ``send_all`` writes through it
        self._ctl = ctl
        self._closed = False

    @classmethod
    async def connect(cls, attach: Path, ctl: Path) -> MonitorInput:
        """Connect to conmon's attach socket ``attach``.

        Raises:
            OSError: conmon does not listen there (it is gone).
        """
        raw = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        raw.setblocking(False)
        sock = trio.socket.from_stdlib_socket(raw)
        try:  # through its directory's descriptor: the whole path may pass the 107 bytes
            here = os.open(attach.parent, os.O_PATH | os.O_CLOEXEC)  # a socket address holds
            try:
                await sock.connect(f"/proc/self/fd/{here}/{attach.name}")
            finally:
                os.close(here)
        except BaseException:
            sock.close()
            raise
        return cls(sock, raw, ctl)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` to the container's stdin.

        Raises:
            trio.BrokenResourceError: conmon is gone (the container exited) or stdin closed.
        """
        view = memoryview(data)
        try:
            for i in range(0, len(view), PACKET):  # (a packet at a time, each whole or none)
                while True:
                    try:
                        self._raw.send(view[i:i + PACKET])
                        break
                    except BlockingIOError:
                        await trio.lowlevel.wait_writable(self._raw)
        except OSError as exc:
            raise trio.BrokenResourceError(str(exc)) from exc
        await trio.lowlevel.checkpoint()  # one per call, not one per packet

    async def aclose(self) -> None:
        """Close the container's stdin (conmon closes it when this socket half-closes, unless
        launched with ``--leave-stdin-open``) and stop using the socket."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_WR)
        await trio.lowlevel.checkpoint()

    async def discard_output(self) -> None:
        """Read and drop what conmon sends until it closes the socket (runs beside the log's
        reader): every packet waiting is taken before the next wait, into one buffer (conmon
        sends each 8 KiB it reads; a container that echoes its input sends it all here
        too). Cancellation: nothing is left behind."""
        buf = bytearray(PACKET + 1)
        taken = 0
        while True:
            try:
                if not self._raw.recv_into(buf):
                    return
                taken += 1
                if taken % 64 == 0:  # a steady sender must not hold the event loop
                    await trio.lowlevel.checkpoint()
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self._raw)
            except OSError:
                return

    def resize(self, rows: int, cols: int) -> None:
        """Ask conmon to set the TTY's window size (the container gets SIGWINCH).

        Raises:
            OSError: conmon does not read its ``ctl`` fifo (it is gone).
        """
        fd = os.open(self._ctl, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            os.write(fd, f"1 {rows} {cols}\n".encode())
        finally:
            os.close(fd)

    def close(self) -> None:
        """Let go of the socket (the daemon stops; the container's stdin stays open only if
        conmon was told to leave it open)."""
        self._sock.close()
