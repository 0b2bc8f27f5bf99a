"""What every log driver is given, and what it must do (moby's ``daemon/logger`` of v1.11:
``Message``, ``Context``/``Info``, ``ExtraAttributes``; read for facts).

A driver ships one container's output to a receiver (the journal, a syslog server, a GELF
or fluentd endpoint). It never decides when to write: the container's ``LogPump``
(``svc.logdrivers.pump``) holds a bounded buffer, calls ``Driver.send`` with batches from
its own task, and keeps the batch when ``send`` raises ``ReceiverDown`` so that it can be sent
again once the driver reconnects. The container's output path only ever appends to that
buffer, so a slow or absent receiver cannot stall the container beyond the buffer's bound.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

STDOUT = "stdout"
STDERR = "stderr"


class ReceiverDown(Exception):
    """The receiver cannot be reached or refused the write: the batch was not (all)
    delivered and the driver has dropped its connection; the pump retries later."""


class OptionError(ValueError):
    """A ``--log-opt`` that the driver does not take, or a malformed value; the message names
    the option (the API answers it with a 400)."""


@dataclass(slots=True)  # (not frozen: a frozen one costs 3x to make, once per line)
class Message:
    """One line of a container's output (without its newline), or a piece of one; drivers
    read it and never change it."""

    line: bytes
    source: str  # STDOUT or STDERR
    time_ns: int  # when the daemon read it: the time json-file records and ``docker logs`` shows
    partial: bool = False  # not a line's end: a 16 KiB piece, or an unfinished line at a flush


@dataclass(frozen=True)
class Info:
    """What a driver knows of its container (moby's ``logger.Info``)."""

    config: Mapping[str, str]  # the driver's --log-opt values
    container_id: str  # 64 hex digits
    container_name: str  # as inspect shows it, with its leading "/"
    image_id: str  # "sha256:<64 hex>"
    image_name: str  # as the container was created from it ("busybox", "repo:tag", an id)
    created_ns: int
    entrypoint: str = ""
    args: Sequence[str] = ()
    env: Sequence[str] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    daemon_name: str = "svc"
    hostname: str = ""

    @property
    def id(self) -> str:
        return self.container_id[:12]

    @property
    def full_id(self) -> str:
        return self.container_id

    @property
    def name(self) -> str:
        return self.container_name.removeprefix("/")

    @property
    def image_short_id(self) -> str:
        return self.image_id.removeprefix("sha256:")[:12]

    @property
    def image_full_id(self) -> str:
        return self.image_id

    def command(self) -> str:
        """The entrypoint and arguments joined by spaces (moby's ``Info.Command``)."""
        return " ".join([self.entrypoint, *self.args]) if self.entrypoint \
            else " ".join(self.args)

    def extra_attributes(self) -> dict[str, str]:
        """The labels and environment variables the ``labels``, ``labels-regex``, ``env`` and
        ``env-regex`` options name (moby's ``ExtraAttributes``): comma-separated keys; the
        regexes match keys. Environment entries without ``=`` are left out."""
        out: dict[str, str] = {}
        wanted_labels = _keys(self.config.get("labels"))
        for key in wanted_labels:
            if key in self.labels:
                out[key] = self.labels[key]
        if pattern := self.config.get("labels-regex"):
            rx = re.compile(pattern)
            out.update({k: v for k, v in self.labels.items() if rx.search(k)})
        env = dict(e.split("=", 1) for e in self.env if "=" in e)
        for key in _keys(self.config.get("env")):
            if key in env:
                out[key] = env[key]
        if pattern := self.config.get("env-regex"):
            rx = re.compile(pattern)
            out.update({k: v for k, v in env.items() if rx.search(k)})
        return out


def _keys(raw: str | None) -> list[str]:
    return [k.strip() for k in raw.split(",") if k.strip()] if raw else []


class Driver(Protocol):
    """One container's connection to its receiver (see the module)."""

    async def send(self, batch: Sequence[Message]) -> None:
        """Deliver ``batch`` in order (connecting first if need be).

        Raises:
          ReceiverDown: not all of it was delivered; the connection is dropped, and the next
            call reconnects. (A receiver that took part of a batch may see those lines twice.)
        """

    async def aclose(self) -> None:
        """Close the connection (after the pump's final flush)."""
