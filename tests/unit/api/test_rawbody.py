"""A request body read from the socket (``svc.api.rawbody``): the HTTP/1.1 framing decoded
whatever the reads' boundaries, by a trio task and then by a worker thread, while the
protocol's read loop waits; bad framing and a body cut short are refused by name; a
cancelled build wakes the thread's read and frees the read loop."""

from __future__ import annotations

import os
import random

import pytest
import trio
import trio.testing

from svc.api.rawbody import BodyError, Dechunker, RawBody
from svc.engine.streams import reading


def _chunked(payload: bytes, sizes: list[int], *, ext: bool = False,
             trailer: bool = False) -> bytes:
    out, pos = bytearray(), 0
    for n in sizes:
        piece = payload[pos:pos + n]
        pos += n
        out += b"%x%s\r\n%s\r\n" % (len(piece), b";name=v" if ext else b"", piece)
    out += b"0\r\n" + (b"X-Trailer: 1\r\n" if trailer else b"") + b"\r\n"
    return bytes(out)


def _decode_in_pieces(d: Dechunker, raw: bytes, rng: random.Random) -> bytes:
    got = bytearray()
    pos = 0
    while pos < len(raw) and not d.done:
        n = rng.randint(1, 50)
        pieces: list[memoryview] = []
        with memoryview(raw[pos:pos + n]) as view:
            used = d.feed(view, pieces)
            got += b"".join(pieces)
        pos += used
        if used < n:
            break
    return bytes(got)


@pytest.mark.parametrize("ext,trailer", [(False, False), (True, True)])
def test_chunked_framing_whatever_the_reads(ext: bool, trailer: bool) -> None:
    rng = random.Random(7)
    payload = os.urandom(3000)
    raw = _chunked(payload, [1, 100, 0x7F, 1000, 1772], ext=ext, trailer=trailer)
    for _ in range(20):
        d = Dechunker(None)
        assert _decode_in_pieces(d, raw + b"GET / HTTP/1.1\r\n", rng) == payload
        assert d.done


def test_content_length_framing() -> None:
    d = Dechunker(5)
    pieces: list[memoryview] = []
    assert d.feed(memoryview(b"abcdefg"), pieces) == 5
    assert b"".join(pieces) == b"abcde" and d.done


@pytest.mark.parametrize("raw,message", [
    (b"zz\r\n", "chunk size b'zz'"),
    (b"-5\r\n", "chunk size b'-5'"),
    (b"0x10\r\n", "chunk size b'0x10'"),
    (b"1_0\r\n", "chunk size b'1_0'"),
    (b"3\r\nabcXX\r\n", "no CRLF after a chunk's data"),
    (b"f" * 5000, "a line is too long"),
])
def test_bad_framing_is_refused(raw: bytes, message: str) -> None:
    with pytest.raises(BodyError, match=message):
        Dechunker(None).feed(memoryview(raw), [])


def test_bad_framing_after_payload_comes_after_that_payload() -> None:
    """However the bytes were cut into reads, the payload before a framing error is handed
    out first; the error comes at the next read (CI saw one read hold both, which made a
    build's stream error an HTTP 400 at random)."""
    d = Dechunker(None)
    assert d.decode(bytearray(b"3\r\nabc\r\nzz\r\n")) == b"abc"
    with pytest.raises(BodyError, match="chunk size b'zz'"):
        d.raise_pending()
    with pytest.raises(BodyError, match="chunk size b'zz'"):
        d.decode(bytearray(b"more"))


def test_a_framing_error_is_raised_again_by_every_later_read() -> None:
    """A read that holds only the error (no payload before it) raises it, and so does every
    later one: a reader that reads on after it (a load drains its body) must not wait on a
    client that is waiting for the answer."""
    d = Dechunker(None)
    assert d.decode(b"3\r\nabc\r\n") == b"abc"
    for _ in range(2):
        with pytest.raises(BodyError, match="chunk size b'zz'"):
            d.decode(b"zz\r\n" if _ == 0 else b"")
    with pytest.raises(BodyError, match="chunk size b'zz'"):
        d.raise_pending()


def test_a_read_that_is_all_payload_is_handed_on_as_it_is() -> None:
    data = os.urandom(1000)
    assert Dechunker(5000).decode(data) is data  # (the load's reads: not copied)
    assert Dechunker(500).decode(data) == data[:500]


def _drain(f: object) -> None:
    while f.read(65536):  # type: ignore[attr-defined]
        pass


async def _socketpair_body(length: int | None, raw: bytes, first: int
                           ) -> tuple[RawBody, trio.socket.SocketType, trio.socket.SocketType]:
    """A body whose first ``first`` bytes came with the head; the rest is sent on the
    client end of a socket pair."""
    server, client = trio.socket.socketpair()
    return RawBody(length, raw[:first], server), server, client


async def test_a_task_then_a_thread_read_the_body_while_the_loop_waits() -> None:
    payload = os.urandom(3 << 20)
    raw = _chunked(payload, [100_000] * 31 + [len(payload) - 3_100_000])
    body, server, client = await _socketpair_body(None, raw, 5000)
    got = bytearray()
    loop_done = trio.Event()

    async def hypercorn_loop() -> None:  # what the protocol does with hypercorn's reads
        while not body.done:
            data = await server.recv(65536)
            await body.feed(data)
            if not data:
                break
        loop_done.set()

    async def client_send() -> None:
        await trio.SocketStream(client).send_all(raw[5000:])

    def read_all(f: object) -> bytes:
        out = bytearray()
        while data := f.read(70_000):  # type: ignore[attr-defined]
            out += data
        return bytes(out)

    async with trio.open_nursery() as n:
        n.start_soon(hypercorn_loop)
        n.start_soon(client_send)
        got += await body.__anext__()  # the first bytes, as the build's early look reads
        async with reading(body) as f:
            got += await trio.to_thread.run_sync(read_all, f)
    assert bytes(got) == payload
    assert loop_done.is_set() and body.done
    server.close()
    client.close()


async def test_a_body_cut_short_is_refused_by_the_thread() -> None:
    body, server, client = await _socketpair_body(10_000, b"x" * 100, 100)

    async def hypercorn_loop() -> None:
        await body.feed(await server.recv(65536))

    async with trio.open_nursery() as n:
        n.start_soon(hypercorn_loop)
        await client.send(b"y" * 100)
        await trio.testing.wait_all_tasks_blocked()
        client.close()  # the client goes away mid-body
        with pytest.RaisesGroup(pytest.RaisesExc(BodyError, match="ended early"),
                                flatten_subgroups=True, allow_unwrapped=True):
            async with reading(body) as f:
                await trio.to_thread.run_sync(_drain, f)
    server.close()


async def test_leaving_the_block_wakes_the_thread_and_frees_the_loop() -> None:
    body, server, client = await _socketpair_body(10_000, b"", 0)
    freed = trio.Event()

    async def hypercorn_loop() -> None:
        await body.feed(await server.recv(65536))
        freed.set()

    async with trio.open_nursery() as n:
        n.start_soon(hypercorn_loop)
        await client.send(b"z" * 10)
        with trio.move_on_after(0.5) as scope:  # the client went away: the build is cancelled
            async with reading(body) as f:
                await trio.to_thread.run_sync(_drain, f)  # the thread's read is woken
        assert scope.cancelled_caught
        with trio.fail_after(5):
            await freed.wait()
    server.close()
    client.close()
