"""What every volume is, whichever driver owns it: its record, its name rule, and the locks
that keep operations on one name in order without holding up the others.

A volume's durable record (``store/volumes/<name>.json``) says which driver owns the name, so
that the daemon knows it after a restart, as moby's volume store did. For a plugin's volume it
also lists the containers the plugin was asked to mount it for (``Mounts``) and has not yet
confirmed unmounting: the reference counts that a crash must not lose.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trio

from svc.errors import InvalidParameter, NotFound, SvcError

LOCAL = "local"
NAME_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+")
PLUGIN_NAME_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.@+-]*")  # a record's name (no ':')
NAME_MAX = 255  # a volume's name is a file name: its record, its directory


@dataclass
class Volume:
    name: str
    driver: str = LOCAL
    mountpoint: str = ""  # local: its directory; a plugin's: the last path it gave
    options: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    created_ns: int = 0
    anonymous: bool = False  # made for a container (a path alone, an image VOLUME)
    users: set[str] = field(default_factory=set)  # containers it is mounted for, this run
    # a plugin's volume: containers whose Unmount is owed (mounted by an earlier run of the
    # daemon, or a Mount whose outcome is unknown): sent in the background (refs.py)
    owed: set[str] = field(default_factory=set)
    status: dict[str, Any] | None = None  # a plugin's Get ``Status``, at the last inspect
    scope: str = ""  # a plugin's Capabilities ``Scope`` ("local" or "global")

    @property
    def local(self) -> bool:
        return self.driver == LOCAL

    def record(self) -> dict[str, Any]:
        rec: dict[str, Any] = {"Name": self.name, "Driver": self.driver,
                               "Options": self.options, "Labels": self.labels,
                               "CreatedAt": self.created_ns, "Anonymous": self.anonymous}
        if not self.local:
            rec["Mounts"] = sorted(self.users | self.owed)
        return rec

    @classmethod
    def from_record(cls, name: str, rec: dict[str, Any]) -> Volume:
        """A loaded record. A plugin volume's ``Mounts`` are all owed: no container runs
        when the daemon starts (restore tears every one down)."""
        return cls(name=name, driver=str(rec.get("Driver") or LOCAL),
                   options={str(k): str(v) for k, v in (rec.get("Options") or {}).items()},
                   labels={str(k): str(v) for k, v in (rec.get("Labels") or {}).items()},
                   created_ns=int(rec.get("CreatedAt") or 0),
                   anonymous=bool(rec.get("Anonymous")),
                   owed={str(c) for c in rec.get("Mounts") or []})


class DriverNotFound(NotFound):
    """No plugin has the volume driver's name (a 404 for the volume endpoints; a container
    create turns it into a 400, as moby did after the CLI took any 404 there for a missing
    image and pulled it: moby#48772)."""


def check_name(name: str, driver: str = LOCAL) -> None:
    """The local driver's rule for names (dockerd's message), or for a plugin's volume what
    a record's name may be (moby left those names to the plugin); and the length of a file
    name."""
    if len(name) > NAME_MAX:
        raise InvalidParameter(f"volume name {name[:32]}... is too long: at most {NAME_MAX} "
                               "characters")
    if driver not in ("", LOCAL):
        if not PLUGIN_NAME_RE.fullmatch(name):
            raise InvalidParameter(f'"{name}" is not a volume name svc can record: use '
                                   '"[a-zA-Z0-9][a-zA-Z0-9_.@+-]*"')
        return
    if not NAME_RE.fullmatch(name):
        raise InvalidParameter(
            f'"{name}" includes invalid characters for a local volume name, only '
            '"[a-zA-Z0-9][a-zA-Z0-9_.-]" are allowed. If you intended to pass a host '
            "directory, use absolute path")


def pattern(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as exc:
        raise InvalidParameter(f"invalid filter 'name={text}': {exc}") from None


def op_error(exc: SvcError, op: str, name: str) -> SvcError:
    """``exc`` (of the same kind) saying which operation on which volume failed, as moby's
    volume store put it: ``create v: VolumeDriver.Create: <the plugin's words>``."""
    exc.message = f"{op} {name}: {exc.message}"
    return exc


class KeyedLock:
    """One lock per key, made on first use and dropped when nobody holds or waits for it:
    work on one volume waits for work on that volume only."""

    def __init__(self) -> None:
        self._locks: dict[Hashable, tuple[trio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: Hashable) -> AsyncIterator[None]:
        lock, n = self._locks.get(key, (None, 0))
        if lock is None:
            lock = trio.Lock()
        self._locks[key] = (lock, n + 1)
        try:
            async with lock:
                yield
        finally:
            lock, n = self._locks[key]
            if n == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, n - 1)
