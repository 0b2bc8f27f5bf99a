"""The daemon's side of a shim, without runc: a peeked pipe leaves what it handed out in the
pipe until consumed (a daemon killed in between loses nothing), and the spool's cursor keeps
its last whole state."""

from __future__ import annotations

import os
from pathlib import Path

import trio

from svc.runtime.shim.cursor import CursorState, SpoolCursor
from svc.runtime.shim.peek import PeekedPipe


async def test_what_is_not_consumed_stays_in_the_pipe() -> None:
    r, w = os.pipe()
    keep = os.dup(r)  # the shim's copy of the read end
    pipe = PeekedPipe(r)
    os.write(w, b"first\n")
    assert await pipe.receive_some() == b"first\n"
    pipe.consume()
    os.write(w, b"second\n")
    assert await pipe.receive_some() == b"second\n"
    await pipe.aclose()  # killed before the log's write: not consumed
    os.write(w, b"third\n")
    os.close(w)
    assert os.read(keep, 100) == b"second\nthird\n"
    os.close(keep)


async def test_the_next_read_consumes_the_last_and_the_end_is_seen() -> None:
    r, w = os.pipe()
    pipe = PeekedPipe(r)
    got = []
    async with trio.open_nursery() as nursery:
        async def read() -> None:
            while chunk := await pipe.receive_some():
                got.append(chunk)

        nursery.start_soon(read)
        for i in range(100):
            os.write(w, b"%d\n" % i)
            await trio.sleep(0)
        os.close(w)
    assert b"".join(got) == b"".join(b"%d\n" % i for i in range(100))
    await pipe.aclose()


def test_the_cursor_keeps_its_last_state(tmp_path: Path) -> None:
    path = str(tmp_path / "cursor")
    cursor = SpoolCursor(path)
    assert cursor.read() == CursorState()
    cursor.write(1234, (b"half a li", b""))
    cursor.write(99, (b"", b"err"), 7)  # shorter than before: the old tail is ignored
    cursor.close()
    again = SpoolCursor(path)
    assert again.read() == CursorState(99, (b"", b"err"), 7)
    again.close()
