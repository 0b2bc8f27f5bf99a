"""The ``journald`` log driver: each message to the systemd journal through its native
protocol, with the fields the engines sent (moby ``daemon/logger/journald/journald.go`` and
the vendored ``coreos/go-systemd/journal``, read for facts).

One datagram per message on the journal's unix datagram socket, ``NAME=value\\n`` per field,
or, for a value that holds a newline, the binary-safe form ``NAME\\n`` + its length as a
little-endian 64-bit integer + the value + ``\\n``. A datagram too large for the socket
(EMSGSIZE or ENOBUFS) goes as a sealed memfd passed with SCM_RIGHTS, as libsystemd's
``sd_journal_sendv`` does.

The fields, per container (v1.11 sent the first four; the tag's default of ``{{.ID}}`` is
v1.13's, v1.11 sent an empty tag when none was given; ``SYSLOG_IDENTIFIER`` = the tag is
v18.06's): ``CONTAINER_ID`` (12 digits), ``CONTAINER_ID_FULL``, ``CONTAINER_NAME`` (without
its "/"), ``CONTAINER_TAG``, ``SYSLOG_IDENTIFIER``, and the ``labels``/``env`` attributes
under keys upper-cased and sanitized as v1.13 did (v1.11 only upper-cased them, and the
journal dropped the ones with a "." or "-"). Per message: ``MESSAGE`` (the line without its
newline), ``PRIORITY`` (6 for stdout, 3 for stderr), ``CONTAINER_PARTIAL_MESSAGE=true`` for a
piece of a line (v1.13), and ``SYSLOG_TIMESTAMP`` (the time the daemon read the line, RFC 3339
with nanoseconds, as later engines send it so that ``docker logs`` shows the same times as
with json-file; the reader in ``svc.logdrivers.journalread`` prefers it).
"""

from __future__ import annotations

import array
import datetime as dt
import errno
import fcntl
import os
import socket
import struct
from collections.abc import Iterable, Mapping, Sequence

import trio

from svc.logdrivers.base import STDERR, Driver, Info, Message, OptionError, ReceiverDown
from svc.logdrivers.options import check_common
from svc.logdrivers.tag import render_tag

SOCKET = "/run/systemd/journal/socket"
PRIORITY_INFO = 6  # stdout (go-systemd journal.PriInfo)
PRIORITY_ERR = 3  # stderr (journal.PriErr)
OPTIONS = frozenset({"labels", "labels-regex", "env", "env-regex", "tag",
                     "mode", "max-buffer-size"})
# The errors after which libsystemd sends the entry as a memfd instead of a datagram.
_TOO_BIG = (errno.EMSGSIZE, errno.ENOBUFS)
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL


def validate(config: Mapping[str, str]) -> None:
    """Refuse what moby's ``validateLogOpt`` refused, and malformed values.

    Raises:
      OptionError: naming the option (moby's message for an unknown key).
    """
    for key in config:
        if key not in OPTIONS:
            raise OptionError(f"unknown log opt '{key}' for journald log driver")
    check_common(config)


def sanitize_key(key: str) -> str:
    """A label or variable name as a journal field name (moby v1.13 ``sanitizeKeyMod``):
    a-z upper-cased, anything but A-Z and 0-9 made "_", leading "_" dropped."""
    out: list[str] = []
    for c in key:
        if "a" <= c <= "z":
            c = c.upper()
        elif not ("A" <= c <= "Z" or "0" <= c <= "9"):
            c = "_"
        if out or c != "_":
            out.append(c)
    return "".join(out)


def encode_field(name: str, value: bytes) -> bytes:
    """One field in the native protocol; the binary-safe form when ``value`` holds a
    newline (go-systemd's ``appendVariable``, libsystemd's ``sd_journal_sendv``)."""
    key = name.encode()
    if b"\n" in value:
        return b"%s\n%s%s\n" % (key, struct.pack("<Q", len(value)), value)
    return b"%s=%s\n" % (key, value)


def encode_entry(fields: Iterable[tuple[str, bytes]]) -> bytes:
    """A whole entry: its fields, each encoded by ``encode_field``."""
    return b"".join(encode_field(name, value) for name, value in fields)


def rfc3339_nano(time_ns: int) -> str:
    """Go's ``time.RFC3339Nano`` in UTC: trailing zeros of the fraction dropped."""
    secs, nanos = divmod(time_ns, 1_000_000_000)
    stamp = dt.datetime.fromtimestamp(secs, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    frac = f"{nanos:09d}".rstrip("0")
    return f"{stamp}.{frac}Z" if frac else f"{stamp}Z"


def container_fields(info: Info) -> list[tuple[str, bytes]]:
    """The fields every entry of the container carries (see the module). The container's own
    fields win over a label or variable that sanitizes to the same name."""
    tag = render_tag(info).encode()
    own = [("CONTAINER_ID", info.id.encode()),
           ("CONTAINER_ID_FULL", info.full_id.encode()),
           ("CONTAINER_NAME", info.name.encode()),
           ("CONTAINER_TAG", tag),
           ("SYSLOG_IDENTIFIER", tag)]
    taken = {name for name, _ in own}
    extra: dict[str, bytes] = {}
    for key, value in info.extra_attributes().items():
        name = sanitize_key(key)
        if name and name not in taken:
            extra[name] = value.encode()
    return own + sorted(extra.items())


def message_fields(msg: Message) -> list[tuple[str, bytes]]:
    """The fields of one message (see the module), in go-systemd's order."""
    priority = PRIORITY_ERR if msg.source == STDERR else PRIORITY_INFO
    out = [("PRIORITY", b"%d" % priority), ("MESSAGE", msg.line)]
    if msg.partial:
        out.append(("CONTAINER_PARTIAL_MESSAGE", b"true"))
    out.append(("SYSLOG_TIMESTAMP", rfc3339_nano(msg.time_ns).encode()))
    return out


class JournaldDriver:
    """One container's messages to the journal (see the module).

    The socket is connected at the first ``send`` and after a failure: a journal restarted
    since (a new socket at the same path) is reached again.
    """

    def __init__(self, info: Info, *, socket_path: str = SOCKET) -> None:
        self.socket_path = socket_path
        self._fields = encode_entry(container_fields(info))
        self._sock: trio.socket.SocketType | None = None
        self.memfd_sends = 0  # entries too large for a datagram (for tests and stats)

    async def send(self, batch: Sequence[Message]) -> None:
        """Write each message as one journal entry, in order.

        Raises:
          ReceiverDown: the socket is missing or refuses (no journal there); the messages
            before the failing one were written.

        Cancellation: a checkpoint per message; an entry is written whole or not at all.
        """
        for msg in batch:
            entry = encode_entry(message_fields(msg)) + self._fields
            sock = await self._connected()
            try:
                await sock.send(entry)
            except OSError as exc:
                if exc.errno not in _TOO_BIG:
                    self._drop()
                    raise ReceiverDown(f"journal at {self.socket_path}: {exc}") from exc
                await self._send_memfd(sock, entry)

    async def _connected(self) -> trio.socket.SocketType:
        if self._sock is None:
            sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                await sock.connect(self.socket_path)
            except OSError as exc:
                sock.close()
                raise ReceiverDown(f"journal at {self.socket_path}: {exc}") from exc
            self._sock = sock
        return self._sock

    async def _send_memfd(self, sock: trio.socket.SocketType, entry: bytes) -> None:
        """The entry in a sealed memfd, its descriptor passed over the socket (libsystemd's
        fallback; journald maps a sealed memfd without copying it)."""
        fd = os.memfd_create("journal-data", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            view = memoryview(entry)
            while view:
                view = view[os.write(fd, view):]
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
            rights = array.array("i", [fd])
            try:
                await sock.sendmsg([], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
            except OSError as exc:
                self._drop()
                raise ReceiverDown(f"journal at {self.socket_path}: {exc}") from exc
            self.memfd_sends += 1
        finally:
            os.close(fd)

    def _drop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    async def aclose(self) -> None:
        """Close the socket (nothing is buffered here: each entry is written whole)."""
        self._drop()
        await trio.lowlevel.checkpoint()


def create(info: Info, *, socket_path: str = SOCKET) -> Driver:
    """The driver for ``info`` (its options already validated); ``socket_path`` is for
    tests, pointing at a private journal."""
    return JournaldDriver(info, socket_path=socket_path)
