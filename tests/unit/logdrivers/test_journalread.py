"""Reading a container's journald entries back (svc.logdrivers.journalread) with journalctl
from a real, private journald: order, stream, time, partial pieces, tail, since, until,
follow, and journalctl's errors."""

from __future__ import annotations

import contextlib
import secrets
import socket
import time
from collections.abc import Iterator

import pytest
import trio

from svc.logdrivers import journald
from svc.logdrivers.base import Info, Message
from svc.logdrivers.journalread import (
    JournalReadError,
    journalctl_args,
    lines_of,
    parse_rfc3339,
    read_journal,
)
from tests.support.journald import PrivateJournald, private_journald


def info() -> Info:
    return Info(config={}, container_id=secrets.token_hex(32), container_name="/r",
                image_id="sha256:" + "0" * 64, image_name="busybox", created_ns=0)


@pytest.fixture(scope="module")
def journal() -> Iterator[PrivateJournald]:
    with private_journald() as j:
        yield j


async def read_all(cid: str, journal: PrivateJournald, *, tail: int | None = None,
                   since_ns: int | None = None, until_ns: int | None = None) -> list[Message]:
    async with contextlib.aclosing(read_journal(
            cid, directory=journal.directory, tail=tail, since_ns=since_ns,
            until_ns=until_ns)) as it:
        return [m async for m in it]


async def write(journal: PrivateJournald, i: Info, *msgs: Message) -> None:
    drv = journald.create(i, socket_path=journal.socket)
    await drv.send(msgs)
    await drv.aclose()


def m(line: bytes, source: str = "stdout", time_ns: int = 0, partial: bool = False) -> Message:
    return Message(line=line, source=source, time_ns=time_ns or time.time_ns(),
                   partial=partial)


def test_rfc3339_nano_round_trips() -> None:
    for t in (1_700_000_000_123_456_789, 1_700_000_000_000_000_000, 1_700_000_000_100_000_000):
        assert parse_rfc3339(journald.rfc3339_nano(t)) == t
    assert parse_rfc3339("2023-11-14T23:13:20.5+01:00") == 1_700_000_000_500_000_000
    assert parse_rfc3339("Nov 14 22:13:20") is None


def test_the_command_line() -> None:
    assert journalctl_args("c" * 64, since_ns=1_500_000_000_250_000_000, until_ns=2 * 10**18,
                           follow=True, directory="/j") == [
        "journalctl", "--output=json", "--all", "--no-pager", "--quiet", "--directory=/j",
        "--since=@1500000000.250000", "--until=@2000000000.000000", "--lines=all",
        "--follow", "CONTAINER_ID_FULL=" + "c" * 64]
    # with a tail, since is read_journal's filter: journalctl would show the first lines
    assert journalctl_args("c", since_ns=1, tail=5)[-2:] == ["--lines=5", "CONTAINER_ID_FULL=c"]
    assert "--lines=all" in journalctl_args("c", follow=True)  # journalctl's default is 10


async def test_everything_back_in_order_with_stream_time_and_pieces(
        journal: PrivateJournald) -> None:
    i, other = info(), info()
    t0 = 1_700_000_000_123_456_789
    await write(journal, other, m(b"not mine"))
    await write(journal, i, m(b"out", time_ns=t0), m(b"err", "stderr", t0 + 1),
                m(b"piece ", time_ns=t0 + 2, partial=True), m(b"end", time_ns=t0 + 3),
                m(b"bin\xff\nary", time_ns=t0 + 4))
    journal.wait_entries(5, f"CONTAINER_ID_FULL={i.full_id}")
    got = await read_all(i.full_id, journal)
    assert got == [Message(b"out", "stdout", t0), Message(b"err", "stderr", t0 + 1),
                   Message(b"piece ", "stdout", t0 + 2, partial=True),
                   Message(b"end", "stdout", t0 + 3), Message(b"bin\xff\nary", "stdout", t0 + 4)]
    assert lines_of(got) == b"out\nerr\npiece end\nbin\xff\nary\n"


async def test_an_entry_of_another_writer_is_timed_by_the_journal(
        journal: PrivateJournald) -> None:
    cid = secrets.token_hex(32)
    before = time.time_ns()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:  # no SYSLOG_TIMESTAMP
        s.sendto(journald.encode_entry([("MESSAGE", b"raw"), ("PRIORITY", b"5"),
                                        ("CONTAINER_ID_FULL", cid.encode())]),
                 journal.socket)
    journal.wait_entries(1, f"CONTAINER_ID_FULL={cid}")
    [got] = await read_all(cid, journal)
    assert got.line == b"raw" and got.source == ""  # priority 5 is neither stream
    assert before // 1000 * 1000 <= got.time_ns <= time.time_ns()


async def test_tail_since_and_until(journal: PrivateJournald) -> None:
    i = info()
    await write(journal, i, *(m(b"early %d" % n) for n in range(3)))
    journal.wait_entries(3, f"CONTAINER_ID_FULL={i.full_id}")
    await trio.sleep(0.01)
    mid = time.time_ns()
    await trio.sleep(0.01)
    await write(journal, i, *(m(b"late %d" % n) for n in range(3)))
    journal.wait_entries(6, f"CONTAINER_ID_FULL={i.full_id}")
    lines = [x.line for x in await read_all(i.full_id, journal, tail=2)]
    assert lines == [b"late 1", b"late 2"]
    assert await read_all(i.full_id, journal, tail=0) == []
    lines = [x.line for x in await read_all(i.full_id, journal, since_ns=mid)]
    assert lines == [b"late 0", b"late 1", b"late 2"]
    lines = [x.line for x in await read_all(i.full_id, journal, until_ns=mid)]
    assert lines == [b"early 0", b"early 1", b"early 2"]
    lines = [x.line for x in await read_all(i.full_id, journal, since_ns=mid, tail=1)]
    assert lines == [b"late 2"]


async def test_follow_gives_what_is_there_then_what_comes(journal: PrivateJournald) -> None:
    i = info()
    await write(journal, i, m(b"old"))
    journal.wait_entries(1, f"CONTAINER_ID_FULL={i.full_id}")
    got: list[bytes] = []
    with trio.fail_after(10):
        it = read_journal(i.full_id, follow=True,
                                                  directory=journal.directory)
        async with contextlib.aclosing(it):
            async for x in it:
                got.append(x.line)
                if x.line == b"old":
                    await write(journal, i, m(b"new 1"), m(b"new 2"))
                if len(got) == 3:
                    break
    assert got == [b"old", b"new 1", b"new 2"]


async def test_journalctl_errors_are_raised() -> None:
    with pytest.raises(JournalReadError, match="Failed to open"):
        async with contextlib.aclosing(read_journal("c" * 64, directory="/nonexistent")) as it:
            async for _ in it:
                pass
