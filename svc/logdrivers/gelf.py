"""The ``gelf`` log driver: GELF 1.1 messages to a Graylog input over UDP (compressed and
chunked) or TCP (null-byte delimited), as moby v1.11's ``daemon/logger/gelf/gelf.go`` and its
vendored ``Graylog2/go-gelf`` (aab2f594) sent them; TCP as later engines added it (go-gelf's
``TCPWriter``).

One message per line::

    {"version":"1.1","host":<daemon's hostname>,"short_message":<line>,
     "timestamp":<seconds, millisecond precision>,"level":6 (stdout) | 3 (stderr),
     "_command":..,"_container_id":..,"_container_name":..,"_created":<RFC 3339 nano>,
     "_image_id":..,"_image_name":..,"_tag":..}

plus the ``labels``/``env`` extra attributes, each key prefixed with ``_`` unless it has one
(they replace a fixed field of the same name, as moby's map merge did). No ``full_message``
and no ``facility`` (moby set neither). The extra fields are sorted by key, as Go's encoder
writes a map. Empty lines are not sent (Graylog refuses an empty ``short_message``; later
engines skip them too).

UDP: the JSON is compressed (``gelf-compression-type``: gzip by default, zlib, none; level
``gelf-compression-level``, go-gelf's default 1, BestSpeed). A payload of more than
``CHUNK_SIZE`` bytes goes in chunks: ``0x1e 0x0f``, an 8-byte random message id, the chunk's
sequence number and the chunk count (one byte each), then up to 1408 bytes. A payload that
would need more than the 128 chunks the GELF spec allows is dropped and counted in
``dropped`` (go-gelf v1.11 sent up to 255, which Graylog discards; later go-gelf refuses
them too).
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import zlib
from collections.abc import Mapping, Sequence

import trio

from svc.logdrivers.base import STDERR, Driver, Info, Message, OptionError, ReceiverDown
from svc.logdrivers.conn import Address, Reconnect, StreamConn
from svc.logdrivers.options import check_common
from svc.logdrivers.tag import render_tag
from svc.wire.timefmt import rfc3339_nano

log = logging.getLogger("svc.logdrivers")

CHUNK_SIZE = 1420  # go-gelf's ChunkSize: below a 1500-byte MTU with the IP and UDP headers
CHUNK_HEADER = 12
CHUNK_DATA = CHUNK_SIZE - CHUNK_HEADER
MAX_CHUNKS = 128  # the GELF spec's limit: Graylog drops a message announcing more
CHUNK_MAGIC = b"\x1e\x0f"
LEVEL_INFO = 6
LEVEL_ERR = 3
COMPRESSIONS = ("gzip", "zlib", "none")
DEFAULT_LEVEL = 1  # flate.BestSpeed, go-gelf's default
# The documented default of v1.11 (v1.11's gelf code passed "" and sent "_tag":"" until moby
# f900e1cf "Standardize default logging tag value" made it "{{.ID}}" like the others).
DEFAULT_TAG = "{{.ID}}"
TCP_RECONNECT_DELAY = 1.0  # gelf-tcp-reconnect-delay's default (go-gelf: 1 s)
WARN_SECONDS = 10.0

_COMMON = {"tag", "gelf-tag", "labels", "env", "labels-regex", "env-regex", "mode",
           "max-buffer-size"}
_HOST_PORT = re.compile(r"^(\[[^\]]*\]|[^:/\[\]]*):(\d*)$")


def parse_address(raw: str | None) -> tuple[str, Address]:
    """``gelf-address`` as ``(scheme, address)``: ``udp://host:port`` or ``tcp://host:port``.

    Raises:
      OptionError: the messages of later engines (v1.11 took only udp://).
    """
    if not raw:
        raise OptionError("gelf-address is a required parameter")
    scheme, sep, rest = raw.partition("://")
    if not sep or scheme not in ("udp", "tcp"):
        raise OptionError("gelf: endpoint needs to be TCP or UDP")
    m = _HOST_PORT.match(rest.rstrip("/"))
    if not m or not m.group(2) or int(m.group(2)) > 65535:
        raise OptionError("gelf: please provide gelf-address as proto://host:port")
    return scheme, Address(host=m.group(1).strip("[]"), port=int(m.group(2)))


def validate(config: Mapping[str, str]) -> None:
    """Refuse what moby refused (v1.11's keys and messages, and the TCP options of later
    engines), plus a malformed ``tag``, ``mode`` or ``max-buffer-size``.

    Raises:
      OptionError: naming the option.
    """
    scheme, _ = parse_address(config.get("gelf-address"))
    for key, val in config.items():
        if key in _COMMON or key == "gelf-address":
            continue
        if key in ("gelf-compression-level", "gelf-compression-type"):
            if scheme != "udp":
                raise OptionError("compression is only supported on UDP")
            ok = (val in COMPRESSIONS if key == "gelf-compression-type"
                  else re.fullmatch(r"[+-]?\d+", val) is not None and -1 <= int(val) <= 9)
            if not ok:
                raise OptionError(f'unknown value "{val}" for log opt "{key}" '
                                  "for gelf log driver")
        elif key in ("gelf-tcp-max-reconnect", "gelf-tcp-reconnect-delay"):
            if scheme != "tcp":
                raise OptionError(f'"{key}" is only valid for TCP')
            if not val.isdigit():
                raise OptionError(f'"{key}" must be a positive integer')
        else:
            raise OptionError(f'unknown log opt "{key}" for gelf log driver')
    check_common(config)


def go_rfc3339_nano(ns: int) -> str:
    """A time as Go's JSON encoder writes a ``time.Time`` (RFC3339Nano: trailing zeros of
    the fraction, and the dot if none is left, trimmed)."""
    head, _, frac = rfc3339_nano(ns).rstrip("Z").partition(".")
    frac = frac.rstrip("0")
    return f"{head}.{frac}Z" if frac else f"{head}Z"


def extra_fields(info: Info) -> dict[str, str]:
    """The fixed ``_`` fields and the extra attributes, as the driver sends them."""
    extra = {
        "_container_id": info.container_id,
        "_container_name": info.name,
        "_image_id": info.image_id,
        "_image_name": info.image_name,
        "_command": info.command(),
        "_tag": render_tag(info, DEFAULT_TAG),
        "_created": go_rfc3339_nano(info.created_ns),
    }
    for key, val in info.extra_attributes().items():
        extra[key if key.startswith("_") else "_" + key] = val
    return extra


class Encoder:
    """Messages to GELF payloads (sans-IO): the JSON, then compression or a frame."""

    def __init__(self, host: str, extra: Mapping[str, str], *, compression: str = "gzip",
                 level: int = DEFAULT_LEVEL) -> None:
        self.compression = compression
        self.level = level
        self._host = _dumps(host)
        # Go's json.Marshal of a map sorts its keys; the fields follow the fixed ones.
        self._tail = _dumps(dict(sorted(extra.items())))[1:]

    def json(self, msg: Message) -> bytes:
        level = LEVEL_ERR if msg.source == STDERR else LEVEL_INFO
        stamp = (msg.time_ns // 1_000_000) / 1000.0  # moby: milliseconds, as a float
        short = _dumps(msg.line.decode("utf-8", "replace"))
        return (f'{{"version":"1.1","host":{self._host},"short_message":{short},'
                f'"timestamp":{stamp!r},"level":{level},{self._tail}').encode()

    def compressed(self, data: bytes) -> bytes:
        if self.compression == "none":
            return data
        wbits = 31 if self.compression == "gzip" else 15  # gzip or zlib framing
        z = zlib.compressobj(self.level, zlib.DEFLATED, wbits)
        return z.compress(data) + z.flush()

    def datagrams(self, msg: Message) -> list[bytes] | None:
        """The UDP datagrams of ``msg`` ([] for an empty line, None if it is too large)."""
        if not msg.line:
            return []
        return chunks(self.compressed(self.json(msg)), os.urandom(8))

    def frame(self, msg: Message) -> bytes:
        """The TCP frame of ``msg``: uncompressed JSON and a null byte (b"" if empty)."""
        return self.json(msg) + b"\0" if msg.line else b""


def chunks(payload: bytes, msg_id: bytes) -> list[bytes] | None:
    """``payload`` as one datagram, or as GELF chunks; None past ``MAX_CHUNKS``."""
    if len(payload) <= CHUNK_SIZE:
        return [payload]
    count = -(-len(payload) // CHUNK_DATA)  # go-gelf's len/1408+1 sent an empty last chunk
    if count > MAX_CHUNKS:                  # when the length was a multiple of 1408
        return None
    return [CHUNK_MAGIC + msg_id + bytes((i, count)) + payload[off:off + CHUNK_DATA]
            for i, off in enumerate(range(0, len(payload), CHUNK_DATA))]


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class GelfDriver:
    """One container's GELF sender (see the module and ``base.Driver``).

    ``dropped`` counts the messages this driver gave up itself: too large for UDP, or a
    batch abandoned after ``gelf-tcp-max-reconnect`` failed attempts (unlimited unless the
    option is given, so that the pump's blocking mode loses nothing while Graylog is down).
    """

    def __init__(self, scheme: str, address: Address, encoder: Encoder,
                 reconnect: Reconnect | None = None) -> None:
        self.scheme = scheme
        self.address = address
        self.encoder = encoder
        self.dropped = 0
        self._reconnect = reconnect or Reconnect(TCP_RECONNECT_DELAY)
        self._stream = StreamConn(address) if scheme == "tcp" else None
        self._udp: trio.socket.SocketType | None = None
        self._warned_at = float("-inf")

    async def connect(self) -> None:
        """Resolve the address and open the UDP socket, or connect over TCP, now (the
        container's start fails if this does, as the engines' did). Raises ReceiverDown."""
        if self._stream is not None:
            await self._stream.connect()
        elif self._udp is None:
            try:
                infos = await trio.socket.getaddrinfo(self.address.host, self.address.port,
                                                      type=socket.SOCK_DGRAM)
                family, type_, proto, _, sockaddr = infos[0]
                sock = trio.socket.socket(family, type_, proto)
                try:
                    await sock.connect(sockaddr)
                except BaseException:
                    sock.close()
                    raise
            except OSError as exc:
                raise ReceiverDown(f"gelf: cannot connect to GELF endpoint: {self.address} "
                                   f"{exc}") from None
            self._udp = sock

    async def send(self, batch: Sequence[Message]) -> None:
        """Send ``batch`` in order (see ``base.Driver.send``).

        Cancellation: a prefix of the batch may have been sent; a TCP connection is closed
        (it may hold half a frame), the UDP socket is kept.
        """
        if self._stream is not None:
            await self._send_tcp(batch)
        else:
            await self._send_udp(batch)

    async def _send_tcp(self, batch: Sequence[Message]) -> None:
        assert self._stream is not None
        self._reconnect.check()
        try:
            await self._stream.send_all(b"".join(self.encoder.frame(m) for m in batch))
        except ReceiverDown:
            if not self._reconnect.failed():
                raise
            self._give_up(len(batch), "gelf-tcp-max-reconnect attempts failed")
            return
        self._reconnect.succeeded()

    async def _send_udp(self, batch: Sequence[Message]) -> None:
        await self.connect()
        assert self._udp is not None
        for msg in batch:
            grams = self.encoder.datagrams(msg)
            if grams is None:
                self._give_up(1, f"a line of {len(msg.line)} bytes needs more than "
                                 f"{MAX_CHUNKS} chunks")
                continue
            for gram in grams:
                try:
                    await self._udp.send(gram)
                except OSError as exc:  # ECONNREFUSED: an ICMP port unreachable came back
                    self._udp.close()
                    self._udp = None
                    raise ReceiverDown(f"gelf: cannot send GELF message: {exc}") from None

    def _give_up(self, n: int, why: str) -> None:
        self.dropped += n
        now = trio.current_time()
        if now - self._warned_at >= WARN_SECONDS:
            self._warned_at = now
            log.warning("gelf driver to %s: %d message(s) dropped so far (%s)",
                        self.address, self.dropped, why)

    async def aclose(self) -> None:
        """Close the socket. Cancellation: it is closed anyway."""
        if self._stream is not None:
            await self._stream.aclose()
        if self._udp is not None:
            self._udp.close()
            self._udp = None


def create(info: Info) -> Driver:
    """The driver for ``info`` (options already validated: OptionError otherwise). It
    connects on its first ``send`` (or ``connect``)."""
    validate(info.config)
    cfg = info.config
    scheme, address = parse_address(cfg.get("gelf-address"))
    encoder = Encoder(info.hostname or socket.gethostname(), extra_fields(info),
                      compression=cfg.get("gelf-compression-type", "gzip"),
                      level=int(cfg.get("gelf-compression-level", DEFAULT_LEVEL)))
    retries = cfg.get("gelf-tcp-max-reconnect")
    reconnect = Reconnect(float(cfg.get("gelf-tcp-reconnect-delay", TCP_RECONNECT_DELAY)),
                          max_retries=int(retries) if retries is not None else None)
    return GelfDriver(scheme, address, encoder, reconnect)

