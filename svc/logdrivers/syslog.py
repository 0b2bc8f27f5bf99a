"""The ``syslog`` log driver: each message to a syslog receiver over udp, tcp, tcp+tls, a
unix stream or datagram socket, or the host's local syslog (moby's
``daemon/logger/syslog/syslog.go`` with ``RackSec/srslog``, read for facts; the bytes sent
are ``svc.logdrivers.syslogfmt``'s).

Options (moby v1.11's keys, with ``labels``/``env`` as v1.12 took them): ``syslog-address``
(``proto://address``; a tcp or udp address without a port gets 514; a unix path must exist
when the container is created; empty: the local syslog, found as srslog found it: a datagram
then a stream socket at ``/dev/log``, ``/var/run/syslog``, ``/var/run/log``),
``syslog-facility`` (a name or 0 to 23; ``daemon`` by default), ``syslog-format``,
``syslog-tls-ca-cert`` (the only CA trusted when given), ``syslog-tls-cert`` and
``-key`` (a client certificate), ``syslog-tls-skip-verify``, and ``tag`` (``{{.ID}}`` by
default; ``syslog-tag`` as the older name). The severity is INFO for stdout, ERR for stderr.

The connection is made at the first ``send`` and again after a failure. Before writing a
batch on a stream, a connection the receiver has closed is noticed (POLLRDHUP), so a batch is
not written into a dead socket and lost: the pump keeps it and sends it after reconnecting.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import socket
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import trio

from svc.logdrivers.base import STDERR, Driver, Info, Message, OptionError, ReceiverDown
from svc.logdrivers.options import check_common
from svc.logdrivers.syslogfmt import (
    FORMATS,
    SEVERITY_ERR,
    SEVERITY_INFO,
    format_message,
    frame,
    local_time,
    octet_counted,
)
from svc.logdrivers.tag import render_tag

OPTIONS = frozenset({
    "syslog-address", "syslog-facility", "syslog-tag", "syslog-format", "syslog-tls-ca-cert",
    "syslog-tls-cert", "syslog-tls-key", "syslog-tls-skip-verify", "tag",
    "labels", "labels-regex", "env", "env-regex", "mode", "max-buffer-size"})
FACILITIES = {
    "kern": 0, "user": 1, "mail": 2, "daemon": 3, "auth": 4, "syslog": 5, "lpr": 6,
    "news": 7, "uucp": 8, "cron": 9, "authpriv": 10, "ftp": 11,
    **{f"local{i}": 16 + i for i in range(8)}}
PROTOCOLS = ("tcp", "tcp+tls", "udp", "unix", "unixgram")
LOCAL_PATHS = ("/dev/log", "/var/run/syslog", "/var/run/log")
DEFAULT_PORT = 514
_DATAGRAM = ("udp", "unixgram")
_CLOSED = select.POLLRDHUP | select.POLLHUP | select.POLLERR
_TRUE = ("", "1", "t", "true", "yes", "on")
_FALSE = ("0", "f", "false", "no", "off")


@dataclass(frozen=True)
class Address:
    """Where to send: ``proto`` is one of ``PROTOCOLS``, or "" for the local syslog."""

    proto: str = ""
    host: str = ""
    port: int = 0
    path: str = ""


def parse_address(raw: str) -> Address:
    """The ``syslog-address`` option (moby's ``parseAddress``).

    Raises:
      OptionError: not ``proto://address`` with a known proto (moby's message), a bad port,
        or a unix path that does not exist.
    """
    if not raw:
        return Address()
    proto, sep, rest = raw.partition("://")
    if not sep or proto not in PROTOCOLS:
        raise OptionError(f"syslog-address should be in form proto://address, got {raw}")
    if proto in ("unix", "unixgram"):
        if not os.path.exists(rest):
            raise OptionError(f"syslog-address {raw}: stat {rest}: no such file or directory")
        return Address(proto, path=rest)
    m = re.fullmatch(r"(\[[^\]]*\]|[^:/\[\]]*)(?::(\d*))?/?", rest)
    if m is None or (m.group(2) is not None and not m.group(2)):
        raise OptionError(f"syslog-address {raw}: invalid host:port")
    port = int(m.group(2)) if m.group(2) else DEFAULT_PORT
    if not 0 < port < 65536:
        raise OptionError(f"syslog-address {raw}: invalid port {port}")
    return Address(proto, host=m.group(1).strip("[]"), port=port)


def parse_facility(raw: str) -> int:
    """The ``syslog-facility`` option as a facility code (moby's ``parseFacility``).

    Raises:
      OptionError: "invalid syslog facility", as moby said it.
    """
    if not raw:
        return FACILITIES["daemon"]
    if raw in FACILITIES:
        return FACILITIES[raw]
    if re.fullmatch(r"[+-]?\d+", raw) and 0 <= int(raw) <= 23:
        return int(raw)
    raise OptionError(f"invalid syslog facility {raw!r} (syslog-facility)")


def _skip_verify(config: Mapping[str, str]) -> bool:
    # moby skipped verification whenever the key was present, even "=false"; here an
    # explicit false keeps it on.
    if "syslog-tls-skip-verify" not in config:
        return False
    raw = config["syslog-tls-skip-verify"].strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise OptionError(f"invalid syslog-tls-skip-verify {raw!r}: use true or false")


def validate(config: Mapping[str, str]) -> None:
    """Refuse what moby's ``ValidateLogOpt`` refused, and malformed values.

    Raises:
      OptionError: naming the option.
    """
    for key in config:
        if key not in OPTIONS:
            raise OptionError(f"unknown log opt '{key}' for syslog log driver")
    parse_address(config.get("syslog-address", ""))
    parse_facility(config.get("syslog-facility", ""))
    if config.get("syslog-format", "") not in FORMATS:
        raise OptionError(f"Invalid syslog format {config['syslog-format']!r} (syslog-format: "
                          "rfc3164, rfc5424 or rfc5424micro)")
    if bool(config.get("syslog-tls-cert")) != bool(config.get("syslog-tls-key")):
        raise OptionError("syslog-tls-cert and syslog-tls-key go together")
    _skip_verify(config)
    check_common(config)


def tls_context(config: Mapping[str, str]) -> ssl.SSLContext:
    """The client context of ``tcp+tls`` (go-connections' ``tlsconfig.Client``).

    Raises:
      OptionError: a certificate or key file that cannot be read, naming its option.
    """
    ca = config.get("syslog-tls-ca-cert") or None
    try:
        ctx = ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise OptionError(f"syslog-tls-ca-cert {ca}: {exc}") from None
    if _skip_verify(config):
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cert := config.get("syslog-tls-cert"):
        try:
            ctx.load_cert_chain(cert, config["syslog-tls-key"])
        except (OSError, ssl.SSLError) as exc:
            raise OptionError(f"syslog-tls-cert/syslog-tls-key {cert}: {exc}") from None
    return ctx


class SyslogDriver:
    """One container's messages to its syslog receiver (see the module)."""

    def __init__(self, info: Info) -> None:
        config = info.config
        self.address = parse_address(config.get("syslog-address", ""))
        self.facility = parse_facility(config.get("syslog-facility", ""))
        self.format = config.get("syslog-format", "")
        self.tag = render_tag(info, "{{.ID}}")
        self.hostname = socket.gethostname()
        self.pid = os.getpid()
        self.octet_counting = octet_counted(self.format, self.address.proto)
        self._ssl = tls_context(config) if self.address.proto == "tcp+tls" else None
        self._stream: trio.abc.Stream | None = None
        self._dgram: trio.socket.SocketType | None = None

    def encode(self, msg: Message) -> bytes:
        """``msg`` as sent: formatted and, on a stream, framed."""
        severity = SEVERITY_ERR if msg.source == STDERR else SEVERITY_INFO
        data = format_message(self.format, self.facility << 3 | severity,
                              local_time(msg.time_ns), self.hostname, self.tag, self.pid,
                              msg.line)
        return frame(data, octet_counting=self.octet_counting)

    async def send(self, batch: Sequence[Message]) -> None:
        """Deliver ``batch`` in order: one datagram per message, or one write of the whole
        batch on a stream.

        Raises:
          ReceiverDown: the receiver cannot be reached, or closed or broke the connection.

        Cancellation: a checkpoint; a stream cancelled mid-write is dropped (the receiver
        may have a part of the batch, and the pump sends all of it again).
        """
        try:
            if self.address.proto in _DATAGRAM or await self._local_is_datagram():
                sock = await self._datagram()
                for msg in batch:
                    await sock.send(self.encode(msg))
            else:
                stream = await self._connected_stream()
                await stream.send_all(b"".join(self.encode(m) for m in batch))
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            await self._drop()
            raise ReceiverDown(f"syslog at {self._where()}: {_why(exc)}") from exc
        except BaseException:
            await self._drop()
            raise

    def _where(self) -> str:
        a = self.address
        return a.path or (f"{a.host}:{a.port}" if a.proto else "the local syslog")

    async def _local_is_datagram(self) -> bool:
        """For the local syslog: connect (a datagram socket first, as srslog) and say which
        kind was found."""
        if self.address.proto or self._stream is not None:
            return False
        if self._dgram is not None:
            return True
        for path in LOCAL_PATHS:
            sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                await sock.connect(path)
            except OSError:
                sock.close()
                continue
            self._dgram = sock
            return True
        for path in LOCAL_PATHS:
            try:
                self._stream = await trio.open_unix_socket(path)
            except OSError:
                continue
            return False
        raise OSError(f"no syslog socket at {', '.join(LOCAL_PATHS)}")

    async def _datagram(self) -> trio.socket.SocketType:
        if self._dgram is None:
            a = self.address
            if a.proto == "unixgram":
                sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                target: object = a.path
            else:
                family, _, _, _, target = (await trio.socket.getaddrinfo(
                    a.host, a.port, type=socket.SOCK_DGRAM))[0]
                sock = trio.socket.socket(family, socket.SOCK_DGRAM)
            try:
                await sock.connect(target)
            except OSError:
                sock.close()
                raise
            self._dgram = sock
        return self._dgram

    async def _connected_stream(self) -> trio.abc.Stream:
        if self._stream is not None and _peer_closed(self._stream):
            raise trio.BrokenResourceError("the receiver closed the connection")
        if self._stream is None:
            a = self.address
            if a.proto == "unix":
                self._stream = await trio.open_unix_socket(a.path)
            elif self._ssl is not None:
                self._stream = await trio.open_ssl_over_tcp_stream(
                    a.host, a.port, ssl_context=self._ssl)
                await self._stream.do_handshake()
            else:
                self._stream = await trio.open_tcp_stream(a.host, a.port)
        return self._stream

    async def _drop(self, *, graceful: bool = False) -> None:
        stream, self._stream = self._stream, None
        if self._dgram is not None:
            self._dgram.close()
            self._dgram = None
        if stream is not None:
            with trio.CancelScope(shield=True):
                if graceful:
                    with trio.move_on_after(1):
                        await stream.aclose()
                        return
                await trio.aclose_forcefully(stream)

    async def aclose(self) -> None:
        """Close the connection: a TLS one with its close_notify (the receiver sees the
        stream end cleanly), not waiting more than a second nor for the receiver's reply.

        Cancellation: shielded; the connection is closed whatever happens.
        """
        with contextlib.suppress(OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            await self._drop(graceful=True)  # trio closes the socket even when this fails


def _why(exc: BaseException) -> str:
    """The words of ``exc``, or of its cause (trio's BrokenResourceError around a TLS
    error has none of its own)."""
    while not str(exc) and exc.__cause__ is not None:
        exc = exc.__cause__
    return str(exc) or type(exc).__name__


def _peer_closed(stream: trio.abc.Stream) -> bool:
    """Whether the receiver has shut the connection down (a syslog receiver never writes,
    but a TLS one may send a session ticket, so only a hang-up counts)."""
    while isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
    if not isinstance(stream, trio.SocketStream):
        return False
    poller = select.poll()
    poller.register(stream.socket.fileno(), select.POLLIN | _CLOSED)
    return any(ev & _CLOSED for _, ev in poller.poll(0))


def create(info: Info) -> Driver:
    """The driver for ``info`` (its options already validated).

    Raises:
      OptionError: a TLS file that cannot be read.
    """
    return SyslogDriver(info)
