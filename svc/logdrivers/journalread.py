"""``docker logs`` for the journald driver: a container's entries read back from the journal
by ``journalctl -o json`` run as a process, never by parsing journal files here.

moby v1.11's ``daemon/logger/journald/read.go`` (read for facts) opened the journal with
libsystemd, matched ``CONTAINER_ID_FULL=<id>``, took each entry's ``MESSAGE`` and added a
newline, recovered the stream from ``PRIORITY`` (3 stderr, 6 stdout, anything else no
stream), timed it by ``__REALTIME_TIMESTAMP`` (when journald received it), sought to
``since``, and for ``tail`` walked back from the end. Here ``journalctl`` does the matching
and seeking (``--since``, ``--until``, ``--lines``, ``--follow``), and the time is the
entry's ``SYSLOG_TIMESTAMP`` when the driver wrote one (the time the daemon read the line, as
later engines read it back), else ``__REALTIME_TIMESTAMP``. A piece of a line
(``CONTAINER_PARTIAL_MESSAGE=true``) comes back as a partial ``Message``: the caller adds
the newline to the others only.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
from collections.abc import AsyncGenerator, AsyncIterator, Sequence

import trio

from svc.logdrivers.base import STDERR, STDOUT, Message

JOURNALCTL = "journalctl"
_READ_SIZE = 64 << 10
_STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")


class JournalReadError(Exception):
    """journalctl failed (no journal there, a bad argument): its message."""


def journalctl_args(container_id: str, *, since_ns: int | None = None,
                    until_ns: int | None = None, tail: int | None = None,
                    follow: bool = False, directory: str | None = None,
                    journalctl: str = JOURNALCTL) -> list[str]:
    """The command that prints the container's entries as JSON, one a line.

    Args:
      since_ns, until_ns: bounds on the journal's receive time (journalctl's own filter).
      tail: the last ``tail`` entries only (None: all of them, also when following, where
        journalctl would show 10). journalctl given both ``--since`` and ``--lines`` shows
        the first entries after ``since``, so with a ``tail`` the ``since`` bound is left to
        ``read_journal`` (as moby walked back ``tail`` entries, stopping at ``since``).
      directory: a journal directory (``-D``) instead of the machine's journal.
    """
    args = [journalctl, "--output=json", "--all", "--no-pager", "--quiet"]
    if directory is not None:
        args.append(f"--directory={directory}")
    if since_ns is not None and tail is None:
        args.append(f"--since={_at(since_ns)}")
    if until_ns is not None:
        args.append(f"--until={_at(until_ns)}")
    if tail is not None:
        args.append(f"--lines={max(tail, 0)}")
    elif follow:
        args.append("--lines=all")
    if follow:
        args.append("--follow")
    args.append(f"CONTAINER_ID_FULL={container_id}")
    return args


def _at(time_ns: int) -> str:
    micros = time_ns // 1000
    return f"@{micros // 1_000_000}.{micros % 1_000_000:06d}"


async def read_journal(container_id: str, *, since_ns: int | None = None,
                       until_ns: int | None = None, tail: int | None = None,
                       follow: bool = False, directory: str | None = None,
                       journalctl: str = JOURNALCTL) -> AsyncGenerator[Message, None]:
    """The container's messages from the journal, oldest first (arguments as
    ``journalctl_args``); with ``follow``, new ones as they arrive until the caller stops.

    Raises:
      JournalReadError: journalctl exited with an error (its stderr is the message).

    Cancellation: closing the generator (use it in ``contextlib.aclosing``, as trio wants of
    async generators) or cancelling it kills journalctl and reaps it (shielded, so no process
    is left behind); nothing else is held.
    """
    args = journalctl_args(container_id, since_ns=since_ns, until_ns=until_ns, tail=tail,
                           follow=follow, directory=directory, journalctl=journalctl)
    if tail is not None and tail <= 0 and not follow:
        return
    proc = await trio.lowlevel.open_process(args, stdin=subprocess.DEVNULL,
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        async for line in _lines(proc.stdout):
            entry = json.loads(line)
            if tail is not None and since_ns is not None and _received_ns(entry) < since_ns:
                continue
            msg = parse_entry(entry)
            if msg is not None:
                yield msg
        err = await _read_all(proc.stderr)
        code = await proc.wait()
        if code != 0:
            raise JournalReadError(err.decode(errors="replace").strip()
                                   or f"journalctl exited with {code}")
    finally:
        with trio.CancelScope(shield=True):
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    await pipe.aclose()


async def _lines(stream: trio.abc.ReceiveStream) -> AsyncIterator[bytes]:
    buf = b""
    while chunk := await stream.receive_some(_READ_SIZE):
        buf += chunk
        *whole, buf = buf.split(b"\n")
        for line in whole:
            if line:
                yield line
    if buf:
        yield buf


async def _read_all(stream: trio.abc.ReceiveStream) -> bytes:
    out = b""
    while chunk := await stream.receive_some(_READ_SIZE):
        out += chunk
    return out


def _received_ns(entry: dict[str, object]) -> int:
    return int(str(entry.get("__REALTIME_TIMESTAMP", "0"))) * 1000


def parse_entry(entry: dict[str, object]) -> Message | None:
    """One entry of ``journalctl -o json`` (decoded) as a ``Message``, or None without a
    ``MESSAGE``.

    journalctl prints a value as a string when it is printable UTF-8, as an array of byte
    values otherwise, and a field present more than once as an array of those (the first
    is taken here).
    """
    text = _value(entry.get("MESSAGE"))
    if text is None:
        return None
    priority = _value(entry.get("PRIORITY"))
    source = {b"3": STDERR, b"6": STDOUT}.get(priority or b"", "")
    stamp = _value(entry.get("SYSLOG_TIMESTAMP"))
    time_ns = parse_rfc3339(stamp.decode(errors="replace")) if stamp else None
    if time_ns is None:
        time_ns = _received_ns(entry)
    partial = _value(entry.get("CONTAINER_PARTIAL_MESSAGE")) == b"true"
    return Message(line=text, source=source, time_ns=time_ns, partial=partial)


def _value(raw: object) -> bytes | None:
    if isinstance(raw, str):
        return raw.encode()
    if isinstance(raw, list) and raw:
        if all(isinstance(b, int) for b in raw):
            return bytes(raw)
        return _value(raw[0])
    return None


def parse_rfc3339(stamp: str) -> int | None:
    """Nanoseconds since the epoch of an RFC 3339 time with up to 9 fraction digits (Go's
    ``RFC3339Nano``, which Python's parser cannot take), or None when it is not one."""
    m = _STAMP.match(stamp)
    if m is None:
        return None
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    try:
        base = dt.datetime.fromisoformat(m.group(1) + zone)
    except ValueError:
        return None
    nanos = int((m.group(2) or "0").ljust(9, "0"))
    return int(base.timestamp()) * 1_000_000_000 + nanos


def lines_of(messages: Sequence[Message]) -> bytes:
    """What ``docker logs`` prints for ``messages``: each with its newline unless partial."""
    return b"".join(m.line if m.partial else m.line + b"\n" for m in messages)
