"""The ``fluentd`` log driver: the fluentd forward protocol (msgpack over TCP, or a unix
socket) as moby v1.11's ``daemon/logger/fluentd/fluentd.go`` sent it through its vendored
``fluent-logger-golang`` v1.1.0.

Each line is one entry in the protocol's *message mode*, a 4-element array (the logger's
``Message`` tuple, with its unset option as nil)::

    [tag, time, {"container_id": <64 hex>, "container_name": "/name",
                 "source": "stdout" | "stderr", "log": <line>, <extra attributes>}, nil]

``time`` is integer seconds (``tm.Unix()``; v1.1.0 had no EventTime). ``container_name``
keeps its leading ``/`` (moby passed ``ContainerName`` unchanged). The extra attributes
(``labels``/``env``) are added under their own names and replace a fixed field of the same
name, as moby's map merge did. A line the pump split (``Message.partial``) carries the
``partial_message``, ``partial_id``, ``partial_ordinal`` and ``partial_last`` fields of
later engines, on every piece. Strings are msgpack str (raw) with the line's bytes as they
are; msgpack-python writes no str8 in this mode, which the tinylib/msgp encoder did: every
decoder reads both alike. The default ``tag`` is ``docker.{{.ID}}`` (v1.11's).

What the fluent-logger options mean here, where the pump owns buffering and retrying:

* ``fluentd-buffer-limit``: the size of the container's pump buffer when ``max-buffer-size``
  is not given (``pump_buffer``). v1.1.0 discarded its whole pending buffer, silently, once
  it passed the limit while down; here the pump's ``mode`` decides (wait, or drop and count).
* ``fluentd-retry-wait`` (default 1 s): the wait before the first reconnection attempt after
  a failure, growing 1.5 times per failed attempt (as v1.1.0), at most 10 s or the wait
  itself (v1.1.0 had no cap: after 20 failures it waited an hour). The driver answers
  ``ReceiverDown`` without trying until then.
* ``fluentd-max-retries``: unlimited unless given (v1.1.0's default was 2^31-1, and then it
  panicked the daemon); with a number, a batch that failed that many retries plus one is
  given up and counted in the driver's ``dropped``, and the next batch starts afresh.
* ``fluentd-async-connect``: False (the default) means the container's start connects first
  (``connect``) and fails if the receiver is absent, as v1.11's ``New`` did; True means it
  never waits for or fails on the receiver (``async_connect``).
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Mapping, Sequence

import msgpack
import trio

from svc.logdrivers.base import Driver, Info, Message, OptionError, ReceiverDown
from svc.logdrivers.conn import Address, Reconnect, StreamConn
from svc.logdrivers.options import check_common
from svc.logdrivers.pump import buffer_options
from svc.logdrivers.tag import render_tag

log = logging.getLogger("svc.logdrivers")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 24224
DEFAULT_TAG = "docker.{{.ID}}"
DEFAULT_RETRY_WAIT = 1.0
RETRY_FACTOR = 1.5  # fluent-logger-golang's defaultReconnectWaitIncreRate
RETRY_CAP = 10.0
WARN_SECONDS = 10.0

KEYS = {"env", "labels", "env-regex", "labels-regex", "tag", "fluentd-tag", "mode",
        "max-buffer-size", "fluentd-address", "fluentd-buffer-limit", "fluentd-retry-wait",
        "fluentd-max-retries", "fluentd-async-connect"}
_HOST_PORT = re.compile(r"^(\[[^\]]*\]|[^:/\[\]]*)(?::(\d*))?$")
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
         "h": 3600.0}
_RAM = re.compile(r"^(\d+(?:\.\d+)*) ?([kmgtp])?i?b?$", re.IGNORECASE)
_BOOLS = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
          "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}


def parse_address(raw: str | None) -> Address:
    """``fluentd-address``: ``host[:port]``, ``tcp://host[:port]`` or ``unix:///path``;
    127.0.0.1:24224 when empty. (v1.11 took ``host[:port]`` only.)

    Raises:
      OptionError: ``invalid fluentd-address (<value>): <why>``, later engines' message.
    """
    if not raw:
        return Address(DEFAULT_HOST, DEFAULT_PORT)
    scheme, sep, rest = raw.partition("://")
    if not sep:
        scheme, rest = "tcp", raw
    if scheme == "unix":
        if not rest.strip("/"):
            raise OptionError(f"invalid fluentd-address ({raw}): path is empty")
        return Address(path=rest)
    if scheme != "tcp":
        raise OptionError(f"invalid fluentd-address ({raw}): unsupported scheme: '{scheme}'")
    m = _HOST_PORT.match(rest)
    if not m:
        raise OptionError(f"invalid fluentd-address ({raw}): should not contain a path "
                          "element" if "/" in rest else f"invalid fluentd-address ({raw})")
    port = m.group(2)
    if port and int(port) > 65535:
        raise OptionError(f"invalid fluentd-address ({raw}): invalid port")
    return Address(m.group(1).strip("[]") or DEFAULT_HOST, int(port) if port else DEFAULT_PORT)


def parse_duration(value: str) -> float:
    """A Go ``time.ParseDuration`` value in seconds ("1s", "500ms", "1m30s", "0").

    Raises:
      ValueError: ``time: invalid duration "<value>"``.
    """
    body = value[1:] if value[:1] in "+-" else value
    if body == "0":
        return 0.0
    if not body or _DURATION.sub("", body):
        raise ValueError(f'time: invalid duration "{value}"')
    secs = sum(float(n) * _UNIT[u] for n, u in _DURATION.findall(body))
    return -secs if value.startswith("-") else secs


def ram_in_bytes(value: str) -> int:
    """A go-units ``RAMInBytes`` size (binary: ``1m`` = 1048576). ValueError if malformed."""
    m = _RAM.match(value)
    if not m:
        raise ValueError(f"invalid size: '{value}'")
    return int(float(m.group(1)) * 1024 ** " kmgtp".index((m.group(2) or " ").lower()))


def _option(config: Mapping[str, str], key: str) -> str | None:
    return config.get(key) or None  # v1.11 read "" as unset


def validate(config: Mapping[str, str]) -> None:
    """Refuse what v1.11 refused, at create rather than at start: unknown keys (its message),
    and malformed values (the parse error, naming the option).

    Raises:
      OptionError: naming the option.
    """
    for key in config:
        if key not in KEYS:
            raise OptionError(f"unknown log opt '{key}' for fluentd log driver")
    parse_address(config.get("fluentd-address"))
    _settings(config)
    check_common(config)
    pump_buffer(config)


def _settings(config: Mapping[str, str]) -> tuple[float, int | None, bool]:
    """(retry wait in seconds, max retries or None, async connect) from the options."""
    wait, retries, is_async = DEFAULT_RETRY_WAIT, None, False
    if raw := _option(config, "fluentd-retry-wait"):
        try:
            wait = parse_duration(raw)
        except ValueError as exc:
            raise OptionError(f"invalid fluentd-retry-wait: {exc}") from None
        if wait < 0:
            raise OptionError(f"invalid fluentd-retry-wait: {raw} is negative")
    if raw := _option(config, "fluentd-max-retries"):
        if not raw.isdigit() or int(raw) > 2**31 - 1:
            raise OptionError(f'invalid fluentd-max-retries: strconv.ParseUint: parsing '
                              f'"{raw}": invalid syntax' if not raw.isdigit() else
                              "invalid fluentd-max-retries: value out of range")
        retries = int(raw)
    if raw := _option(config, "fluentd-async-connect"):
        if raw not in _BOOLS:
            raise OptionError(f'invalid fluentd-async-connect: strconv.ParseBool: parsing '
                              f'"{raw}": invalid syntax')
        is_async = _BOOLS[raw]
    return wait, retries, is_async


def pump_buffer(config: Mapping[str, str]) -> tuple[str, int]:
    """The pump's ``mode`` and buffer size for this driver: ``max-buffer-size`` if given,
    else ``fluentd-buffer-limit`` (binary units, as v1.11 read it), else the pump's default.

    Raises:
      OptionError: naming the option.
    """
    mode, size = buffer_options(dict(config))
    if "max-buffer-size" not in config and (raw := _option(config, "fluentd-buffer-limit")):
        try:
            size = ram_in_bytes(raw)
        except ValueError as exc:
            raise OptionError(f"invalid fluentd-buffer-limit: {exc}") from None
        if size <= 0:
            raise OptionError("invalid fluentd-buffer-limit: must be a positive size")
    return mode, size


class Encoder:
    """Messages to forward-protocol entries (sans-IO).

    ``encode`` does not change the encoder: it returns the partial-line state after the
    batch, which the driver keeps only once the batch is delivered (a batch sent again
    after ``ReceiverDown`` gets the same partial ids and ordinals).
    """

    def __init__(self, tag: str, container_id: str, container_name: str,
                 extra: Mapping[str, str]) -> None:
        self.tag = tag
        self._fixed = {"container_id": container_id, "container_name": container_name}
        self._extra = dict(extra)
        self._packer = msgpack.Packer(use_bin_type=False)
        self.partial: dict[str, tuple[str, int]] = {}  # source -> (id, last ordinal)

    def encode(self, batch: Sequence[Message]) -> tuple[bytes, dict[str, tuple[str, int]]]:
        partial = dict(self.partial)
        out = []
        for msg in batch:
            record: dict[str, str | bytes] = {**self._fixed, "source": msg.source,
                                              "log": msg.line, **self._extra}
            open_ = partial.get(msg.source)
            if msg.partial or open_:
                pid, ordinal = open_ or (secrets.token_hex(32), 0)
                record.update(partial_message="true", partial_id=pid,
                              partial_ordinal=str(ordinal + 1),
                              partial_last="false" if msg.partial else "true")
                if msg.partial:
                    partial[msg.source] = (pid, ordinal + 1)
                else:
                    del partial[msg.source]
            out.append(self._packer.pack([self.tag, msg.time_ns // 1_000_000_000, record,
                                          None]))
        return b"".join(out), partial


class FluentdDriver:
    """One container's fluentd sender (see the module and ``base.Driver``)."""

    def __init__(self, address: Address, encoder: Encoder, *, retry_wait: float,
                 max_retries: int | None, async_connect: bool) -> None:
        self.address = address
        self.encoder = encoder
        self.retry_wait = retry_wait
        self.max_retries = max_retries
        self.async_connect = async_connect
        self.dropped = 0
        self._conn = StreamConn(address)
        self._reconnect = Reconnect(retry_wait, factor=RETRY_FACTOR, cap=RETRY_CAP,
                                    max_retries=max_retries)
        self._warned_at = float("-inf")

    async def connect(self) -> None:
        """Connect now (at the container's start unless ``async_connect``).

        Raises:
          ReceiverDown: the receiver cannot be reached (v1.11 failed the start with it).
        """
        await self._conn.connect()

    async def send(self, batch: Sequence[Message]) -> None:
        """Send ``batch`` in order, in one write (see ``base.Driver.send``).

        Cancellation: some of the bytes may have been written; the connection is closed
        (it may end in half an entry) and the batch counts as not delivered.
        """
        self._reconnect.check()
        data, partial = self.encoder.encode(batch)
        try:
            await self._conn.send_all(data)
        except ReceiverDown:
            if not self._reconnect.failed():
                raise
            self.encoder.partial = partial
            self._give_up(len(batch))
            return
        self._reconnect.succeeded()
        self.encoder.partial = partial

    def _give_up(self, n: int) -> None:
        self.dropped += n
        now = trio.current_time()
        if now - self._warned_at >= WARN_SECONDS:
            self._warned_at = now
            log.warning("fluentd driver to %s: %d message(s) dropped so far (no connection "
                        "after fluentd-max-retries=%s retries)", self.address, self.dropped,
                        self.max_retries)

    async def aclose(self) -> None:
        """Close the connection. Cancellation: it is closed anyway."""
        await self._conn.aclose()


def create(info: Info) -> Driver:
    """The driver for ``info`` (OptionError if its options are not valid). It never
    connects here: ``connect`` (when not ``async_connect``) or the first ``send`` does."""
    validate(info.config)
    wait, retries, is_async = _settings(info.config)
    encoder = Encoder(render_tag(info, DEFAULT_TAG), info.container_id, info.container_name,
                      info.extra_attributes())
    return FluentdDriver(parse_address(info.config.get("fluentd-address")), encoder,
                         retry_wait=wait, max_retries=retries, async_connect=is_async)
