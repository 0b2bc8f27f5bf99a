"""The daemon's connection to a svc-shim (``svc-shim.c`` has the protocol): at connect the
shim stops reading the container's output and hands over its descriptors (the pty master,
or stdout's and stderr's read ends and stdin's write end) with the state of its spool and of
the process; the daemon then reads the pipes itself, as it reads those of a container it runs
without the shim. When the connection closes (the daemon stops or dies), the shim drains the
pipes into its spool until the next daemon connects.
"""

from __future__ import annotations

import array
import contextlib
import os
import socket
from dataclasses import dataclass
from pathlib import Path

import trio

MAX_FDS = 5
HELLO_WAIT = 10.0  # bound on a shim's hello after it accepted


@dataclass
class Hello:
    """What the shim says at connect."""

    spool_size: int  # bytes in the spool (whole records)
    acked: int  # how far the daemon acknowledged reading it
    dropped: int  # output bytes not kept (the spool was full), since the shim started
    exit: tuple[int, int] | None  # (exit code, end in ns), if the process has ended
    # [pty master], or [stdout, stderr, stdout's journal, stderr's journal (+ stdin)]
    fds: list[int]
    taken: tuple[int, int]  # stdout's and stderr's offsets at the head of their pipes


class ShimError(OSError):
    """The shim cannot be reached, or said something this daemon does not understand."""


class ShimChannel:
    """One connection to a shim. Sends do not wait (a packet of a few bytes to a socket with
    room); what the shim says is read by ``run``, which the waits need running."""

    def __init__(self, sock: socket.socket, hello: Hello) -> None:
        self._sock = sock
        self.hello = hello
        self.exit: tuple[int, int] | None = hello.exit
        self.gone = False  # the shim closed the connection (it exited, or was killed)
        self._changed = trio.Event()

    @classmethod
    async def connect(cls, path: Path) -> ShimChannel:
        """Connect and read the hello (its descriptors are the caller's to close).

        Raises:
            ShimError: no shim answers at ``path`` (it has exited), or its hello is garbled.
        """
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        try:
            sock.setblocking(False)
            while True:
                try:
                    _connect(sock, path)
                    break
                except BlockingIOError:  # its backlog is full: it accepts in a moment
                    await trio.sleep(0.01)
            with trio.move_on_after(HELLO_WAIT):  # (a stopped shim must not stop a start)
                await trio.lowlevel.wait_readable(sock)
                data, fds = _receive(sock)
                return cls(sock, _parse_hello(data, fds))
            raise ShimError(0, f"svc-shim at {path} said nothing in {HELLO_WAIT:.0f} s")
        except OSError as exc:
            sock.close()
            if isinstance(exc, ShimError):
                raise
            raise ShimError(exc.errno, f"svc-shim at {path}: {exc.strerror or exc}") from exc
        except BaseException:
            sock.close()
            raise

    def ack(self, offset: int) -> None:
        """The spool up to ``offset`` is read and kept: it no longer counts to the bound."""
        self._send(b"ack %d\n" % offset)

    async def _wait_change(self) -> None:
        changed = self._changed
        await changed.wait()

    async def run(self) -> None:
        """Read what the shim says until it closes the connection. Cancellation: a
        checkpoint; a message half read is not possible (one packet each)."""
        try:
            while True:
                await trio.lowlevel.wait_readable(self._sock)
                try:
                    data, fds = _receive(self._sock)
                except BlockingIOError:
                    continue
                except OSError:
                    data, fds = b"", []
                for fd in fds:
                    os.close(fd)
                if not data:
                    return
                words = data.split()
                if len(words) == 3 and words[0] == b"exit":
                    self.exit = int(words[1]), int(words[2])
                self._wake()
        finally:
            self.gone = True
            self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def close_stdin(self) -> None:
        self._send(b"close-stdin\n")

    def done(self) -> None:
        """The process has ended and its output is read to the end: the shim may exit."""
        self._send(b"done\n")

    def _send(self, data: bytes) -> None:
        with contextlib.suppress(OSError):  # gone: it has exited, nothing to tell
            self._sock.send(data, socket.MSG_NOSIGNAL)

    async def wait_exit(self) -> tuple[int, int] | None:
        """(exit code, end in ns) once the process has ended; None if the shim went without
        telling (it was killed). Needs ``run``. Cancellation: a checkpoint."""
        while self.exit is None and not self.gone:
            await self._wait_change()
        return self.exit

    def close(self) -> None:
        """Let go: the shim starts draining the output into its spool."""
        with contextlib.suppress(OSError):
            trio.lowlevel.notify_closing(self._sock)
        self._sock.close()


def _connect(sock: socket.socket, path: Path) -> None:
    """Through the directory's descriptor when the path is longer than a socket address
    holds (107 bytes)."""
    if len(os.fsencode(path)) < 100:
        sock.connect(str(path))
        return
    dfd = os.open(path.parent, os.O_PATH | os.O_CLOEXEC)
    try:
        sock.connect(f"/proc/self/fd/{dfd}/{path.name}")
    finally:
        os.close(dfd)


def _receive(sock: socket.socket) -> tuple[bytes, list[int]]:
    fds = array.array("i")
    data, ancdata, _flags, _addr = sock.recvmsg(
        256, socket.CMSG_SPACE(MAX_FDS * fds.itemsize), socket.MSG_CMSG_CLOEXEC)
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(payload) - len(payload) % fds.itemsize
            fds.frombytes(payload[:usable])
    return data, list(fds)


def _parse_hello(data: bytes, fds: list[int]) -> Hello:
    words = data.split()
    if len(words) != 9 or words[0] != b"hello":
        for fd in fds:
            os.close(fd)
        raise ShimError(0, f"svc-shim said {data[:80]!r}, not its hello")
    size, acked, dropped, exited, code, at, out, err = (int(w) for w in words[1:])
    return Hello(size, acked, dropped, (code, at) if exited else None, fds, (out, err))
