"""The log drivers that ship output to a receiver, by name: their options checked at create,
one opened (with its pump) for each run of a container, and the journal read back.

``json-file`` and ``none`` are not here: the container's supervisor writes json-file itself
(``svc.storage.jsonlog``), and ``none`` writes nothing.

Tests point the journald driver at a private journal with ``SVC_JOURNAL_SOCKET`` (its
native socket) and ``SVC_JOURNAL_DIRECTORY`` (what ``journalctl -D`` reads).
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, Mapping
from types import ModuleType

from svc.logdrivers import fluentd, gelf, journald, journalread, syslog
from svc.logdrivers.base import Driver, Info, Message, OptionError
from svc.logdrivers.pump import LogPump, buffer_options

SHIPPING: dict[str, ModuleType] = {"journald": journald, "syslog": syslog, "gelf": gelf,
                                   "fluentd": fluentd}
READABLE = ("json-file", "journald")  # what ``docker logs`` can read back


def validate(name: str, config: Mapping[str, str]) -> None:
    """Check ``config`` for the shipping driver ``name``.

    Raises:
      OptionError: naming the option (an unknown one, or a malformed value).
    """
    SHIPPING[name].validate(config)


def _buffer(name: str, config: Mapping[str, str]) -> tuple[str, int]:
    if name == "fluentd":
        return fluentd.pump_buffer(config)  # (fluentd-buffer-limit sizes it too)
    return buffer_options(dict(config))


def open_pump(name: str, info: Info) -> LogPump:
    """The driver ``name`` for a container's run, behind its pump (options validated)."""
    driver: Driver
    if name == "journald":
        driver = journald.create(info, socket_path=os.environ.get("SVC_JOURNAL_SOCKET",
                                                                  journald.SOCKET))
    else:
        driver = SHIPPING[name].create(info)
    mode, size = _buffer(name, info.config)
    return LogPump(driver, mode=mode, max_bytes=size, name=f"container {info.id}")


async def connect_at_start(pump: LogPump) -> None:
    """Connect now, as the engines did at a container's start, for a driver that must
    (fluentd without ``fluentd-async-connect``, GELF): an unreachable receiver fails the start.

    Raises:
      ReceiverDown: the receiver cannot be reached.
    """
    connect = getattr(pump.driver, "connect", None)
    if connect is not None and not getattr(pump.driver, "async_connect", False):
        await connect()


def read_journal(container_id: str, *, since_ns: int | None, until_ns: int | None,
                 tail: int | None, follow: bool) -> AsyncGenerator[Message, None]:
    """A container's messages from the journal (``journalread.read_journal``)."""
    return journalread.read_journal(container_id, since_ns=since_ns, until_ns=until_ns,
                                    tail=tail, follow=follow,
                                    directory=os.environ.get("SVC_JOURNAL_DIRECTORY"))


__all__ = ["READABLE", "SHIPPING", "OptionError", "connect_at_start", "open_pump",
           "read_journal", "validate"]
