"""Event streams served from the connection's first read (svc.api.barestream), or opened in
the accept loop with no task (svc.api.taskless): many opened at once, each given what a stream
opened the full way gets, and closed when its client goes, whatever the client sent after its
request; a client that stops reading gets every event in order once it reads again; streams
count against the connection limit, and so do connections that have not sent their first
byte yet (``svc.api.arrivals``), which are served like any other once they do; a connection
that never sent a byte does not hold up the daemon's shutdown."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from tests.support.daemon import Daemon
from tests.support.descriptors import quiet_fds, settled_fds

EVENTS = b"GET /v1.23/events HTTP/1.1\r\nHost: docker\r\nUser-Agent: Docker-Client/28.0.0\r\n\r\n"


@pytest.fixture(scope="module")
def d() -> Iterator[Daemon]:
    daemon = Daemon().start()
    yield daemon
    daemon.cleanup()


def _open(d: Daemon, *parts: bytes) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(str(d.sock))
    for i, part in enumerate(parts):
        if i:
            time.sleep(0.1)  # (its own read: the head arrives in two)
        s.sendall(part)
    return s


def _head(s: socket.socket, buf: bytearray) -> dict[str, str]:
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        assert chunk, bytes(buf)
        buf += chunk
    end = buf.index(b"\r\n\r\n")
    lines = bytes(buf[:end]).decode().split("\r\n")
    del buf[: end + 4]
    assert lines[0] == "HTTP/1.1 200 OK", lines
    return {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}


def _event(s: socket.socket, buf: bytearray) -> dict[str, object]:
    """The next event of a chunked stream (one event per chunk here: nothing else happens)."""
    while b"}\n" not in buf:
        chunk = s.recv(65536)
        assert chunk, bytes(buf)
        buf += chunk
    size_end = buf.index(b"\r\n")
    size = int(buf[:size_end], 16)
    while len(buf) < size_end + 2 + size + 2:
        buf += s.recv(65536)
    body = bytes(buf[size_end + 2: size_end + 2 + size])
    del buf[: size_end + 2 + size + 2]
    return json.loads(body.splitlines()[0])


def _create_volume(d: Daemon, name: str) -> None:
    body = json.dumps({"Name": name}).encode()
    with _open(d, b"POST /v1.23/volumes/create HTTP/1.1\r\nHost: docker\r\nContent-Type: "
               b"application/json\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body)) as s:
        assert s.recv(65536).startswith(b"HTTP/1.1 201")


def test_fifty_streams_opened_at_once_each_get_the_next_event(d: Daemon) -> None:
    before = quiet_fds(d)
    socks = [_open(d, EVENTS) for _ in range(50)]
    bufs = [bytearray() for _ in socks]
    heads = [_head(s, b) for s, b in zip(socks, bufs, strict=True)]
    _create_volume(d, "bare50")
    for s, b in zip(socks, bufs, strict=True):
        ev = _event(s, b)
        assert (ev["Type"], ev["Action"], ev["Actor"]) == \
            ("volume", "create", {"ID": "bare50", "Attributes": {"driver": "local"}})
    for s in socks:
        s.close()
    assert settled_fds(d, before) <= before
    # the same head as a stream opened the full way (its head in two reads goes through h11)
    with _open(d, EVENTS[:20], EVENTS[20:]) as full:
        assert _head(full, bytearray()) == heads[0]
    assert heads[0]["transfer-encoding"] == "chunked"
    assert heads[0]["connection"] == "close"


def test_what_a_client_sends_after_its_request_is_dropped(d: Daemon) -> None:
    before = quiet_fds(d)
    s = _open(d, EVENTS)
    buf = bytearray()
    _head(s, buf)
    s.sendall(b"x" * 300_000)  # (more than one read of the watch)
    _create_volume(d, "bare-junk")
    assert _event(s, buf)["Actor"] == {"ID": "bare-junk", "Attributes": {"driver": "local"}}
    s.close()
    assert settled_fds(d, before) <= before


def _late(d: Daemon, request: bytes) -> socket.socket:
    """A client slow to write: its request comes after the daemon has accepted it (as two
    accepts in three under CPU contention)."""
    s = _open(d)
    time.sleep(0.2)
    s.sendall(request)
    return s


def test_requests_whose_bytes_come_after_the_accept_are_served_alike(d: Daemon) -> None:
    before = quiet_fds(d)
    streams = [_late(d, EVENTS) for _ in range(3)]
    bufs = [bytearray() for _ in streams]
    for s, buf in zip(streams, bufs, strict=True):
        _head(s, buf)
    _create_volume(d, "bare-late")
    for s, buf in zip(streams, bufs, strict=True):
        assert _event(s, buf)["Actor"] == {"ID": "bare-late",
                                           "Attributes": {"driver": "local"}}
    with _late(d, b"GET /_ping HTTP/1.1\r\nHost: docker\r\n\r\n") as ping:
        assert ping.recv(65536).startswith(b"HTTP/1.1 200 OK")
    body = json.dumps({"Name": "bare-late-2"}).encode()
    with _late(d, b"POST /v1.23/volumes/create HTTP/1.1\r\nHost: docker\r\nContent-Type: "
               b"application/json\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body)) as post:
        assert post.recv(65536).startswith(b"HTTP/1.1 201")
    for s, buf in zip(streams, bufs, strict=True):
        assert _event(s, buf)["Actor"]["ID"] == "bare-late-2"  # type: ignore[index]
        s.close()
    for _ in range(5):  # clients that went before they wrote anything
        _open(d).close()
    with _open(d) as gone:
        gone.shutdown(socket.SHUT_WR)
        assert gone.recv(10) == b""
    assert settled_fds(d, before) <= before


def test_a_half_close_ends_the_stream(d: Daemon) -> None:
    """The client's EOF means it has gone (as dockerd reads it): the daemon closes too."""
    before = quiet_fds(d)
    with _open(d, EVENTS) as s:
        buf = bytearray()
        _head(s, buf)
        s.shutdown(socket.SHUT_WR)
        while s.recv(65536):
            pass
    assert settled_fds(d, before) <= before


def test_a_stream_after_a_request_on_the_same_connection_goes_the_full_way(d: Daemon) -> None:
    """Only a connection's first request is served bare; later ones are hypercorn's."""
    with _open(d, b"GET /_ping HTTP/1.1\r\nHost: docker\r\n\r\n") as s:
        buf = bytearray()
        assert _head(s, buf)["content-length"] == "2"
        while len(buf) < 2:
            buf += s.recv(65536)
        del buf[:2]
        s.sendall(EVENTS)
        _head(s, buf)
        _create_volume(d, "bare-second")
        assert _event(s, buf)["Actor"] == {"ID": "bare-second", "Attributes": {"driver": "local"}}


def _chunks_until(s: socket.socket, buf: bytearray, count: int) -> list[dict[str, object]]:
    """Read a chunked stream's events (several per chunk) until ``count`` have come."""
    events: list[dict[str, object]] = []
    while len(events) < count:
        while b"\r\n" not in buf or len(buf) < buf.index(b"\r\n") + 4 + \
                int(buf[: buf.index(b"\r\n")], 16):
            chunk = s.recv(1 << 20)
            assert chunk, (len(events), bytes(buf[:200]))
            buf += chunk
        size_end = buf.index(b"\r\n")
        size = int(buf[:size_end], 16)
        assert size, "the stream ended"
        body = bytes(buf[size_end + 2: size_end + 2 + size])
        del buf[: size_end + 2 + size + 2]
        events += [json.loads(line) for line in body.splitlines()]
    return events


def test_a_client_that_stops_reading_gets_every_event_in_order_once_it_reads(
        d: Daemon) -> None:
    """Past what the socket holds, the stream's writes wait for the client (a stream opened
    without a task is handed to one then): nothing is lost, repeated or reordered."""
    actor = f"slow{time.monotonic_ns()}"
    target = "/v1.23/events?filters=" + quote(json.dumps({"container": [actor]}))
    s = _open(d, b"GET %b HTTP/1.1\r\nHost: docker\r\n\r\n" % target.encode())
    buf = bytearray()
    _head(s, buf)
    for _ in range(3):  # 3,000 events of ~400 bytes: twenty times the socket's buffers
        with _open(d, b"POST /_probe/events?n=1000&numbered=1&id=%b HTTP/1.1\r\nHost: x\r\n"
                   b"Content-Length: 0\r\n\r\n" % actor.encode()) as pub:
            assert pub.recv(65536).startswith(b"HTTP/1.1 200")
    events = _chunks_until(s, buf, 3000)
    assert [ev["id"] for ev in events] == [f"{actor}-{i}" for i in range(1000)] * 3
    s.close()


def test_streams_count_against_the_connection_limit() -> None:
    """Streams opened without a task count as connections: one over the limit is refused
    with 503, and once one closes another may open."""
    d = Daemon(env={"SVC_MAX_CONNECTIONS": "8"}).start()
    try:
        quiet_fds(d)  # (the start's pings have closed)
        streams: list[socket.socket] = []
        while True:
            s = _open(d, EVENTS)
            head = s.recv(65536)
            if not head.startswith(b"HTTP/1.1 200"):
                s.close()
                break
            streams.append(s)
            assert len(streams) <= 8
        assert head.startswith(b"HTTP/1.1 503") and len(streams) == 8, (head, len(streams))
        streams.pop().close()
        deadline = time.monotonic() + 5
        while True:  # (the daemon closes its end when it sees the client's go)
            with _open(d, EVENTS) as again:
                head = again.recv(65536)
                if head.startswith(b"HTTP/1.1 200") or time.monotonic() > deadline:
                    break
            time.sleep(0.05)
        assert head.startswith(b"HTTP/1.1 200"), head
        for s in streams:
            s.close()
    finally:
        d.cleanup()


def test_connections_yet_to_send_count_against_the_connection_limit() -> None:
    """Eight connections that have sent nothing yet fill a limit of eight: a stream asked
    for then is refused with 503. Once one of them sends its request it is served."""
    d = Daemon(env={"SVC_MAX_CONNECTIONS": "8"}).start()
    try:
        base = quiet_fds(d)  # (the start's pings have closed)
        silent = [_open(d) for _ in range(8)]
        time.sleep(0.2)  # (each accepted, and found with nothing to read)
        with _open(d, EVENTS) as over:
            assert over.recv(65536).startswith(b"HTTP/1.1 503")
        assert settled_fds(d, base + 8) == base + 8  # (the refused one has gone)
        silent[0].sendall(EVENTS)
        _head(silent[0], bytearray())
        for s in silent:
            s.close()
    finally:
        d.cleanup()


def test_a_connection_that_never_sent_a_byte_does_not_hold_up_the_shutdown() -> None:
    d = Daemon().start()
    try:
        with socket.socket(socket.AF_UNIX) as silent, _open(d, EVENTS) as stream:
            silent.settimeout(10)
            silent.connect(str(d.sock))
            _head(stream, bytearray())
            time.sleep(0.2)
            start = time.monotonic()
            assert d.stop() == 0
            # (the graceful timeout is 5 s: neither connection waited for it)
            assert time.monotonic() - start < 4
            assert silent.recv(10) == b""
    finally:
        d.cleanup()
