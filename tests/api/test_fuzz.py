"""Fuzzing every endpoint with a fixed budget: no answer of 500 or more, no hang, bounded RSS.

The routes come from the daemon itself (``/_probe/routes``); the requests from
``tests.support.fuzz`` (schema-driven bodies, odd queries and paths, fixed seed). Then raw
sockets send what is not HTTP at all.
"""

from __future__ import annotations

import contextlib
import random
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trio

from tests.conftest import http_client
from tests.runtime.conftest import skip_reason
from tests.support import fuzz
from tests.support.daemon import Daemon

RSS_GROWTH_MAX = 64 << 20  # what the fuzz may leave behind (it left 100 MiB before)


def _raw_cases(rng: random.Random) -> Iterator[tuple[str, bytes]]:
    yield "h2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    yield "tls hello", bytes.fromhex("160301") + rng.randbytes(200)
    yield "huge url", b"GET /info?" + b"a" * (2 << 20) + b" HTTP/1.1\r\n\r\n"
    yield "huge header", b"GET /info HTTP/1.1\r\nX: " + b"a" * (2 << 20) + b"\r\n\r\n"
    yield "bad header", b"GET /info HTTP/1.1\r\nno colon here\r\n\r\n"
    yield "bad length", b"POST /containers/create HTTP/1.1\r\nContent-Length: -5\r\n\r\n"
    yield "two lengths", (b"POST /info HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2"
                          b"\r\n\r\nab")
    yield "bad chunk", (b"POST /containers/create HTTP/1.1\r\nTransfer-Encoding: chunked"
                        b"\r\n\r\nzz\r\n")
    yield "big body", (b"POST /volumes/create HTTP/1.1\r\nContent-Type: application/json\r\n"
                       b"Content-Length: 9000000\r\n\r\n" + b"[" * 9_000_000)
    for i in range(150):
        yield f"random {i}", rng.randbytes(rng.choice([1, 7, 100, 3000]))


def _raw_exchange(sock_path: Path, data: bytes, timeout: float) -> bytes:
    """Send ``data``; what came back before the daemon closed (b"" if it only closed).
    Raises TimeoutError when the daemon neither answered nor closed in time."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        s.connect(str(sock_path))
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except ConnectionResetError:
            pass
        return out


async def _raw_garbage(d: Daemon, head_timeout: float) -> list[str]:
    """Every case on its own connection, all at once (most wait out the head timeout)."""
    assert d.proc is not None
    rng = random.Random(fuzz.SEED + 1)
    failures: list[str] = []
    limiter = trio.CapacityLimiter(40)

    async def one(label: str, data: bytes) -> None:
        try:
            out = await trio.to_thread.run_sync(_raw_exchange, d.sock, data, head_timeout + 10,
                                                limiter=limiter)
        except TimeoutError:
            failures.append(f"{label}: neither answered nor closed")
            return
        except OSError as exc:  # no socket to connect to: the daemon went
            failures.append(f"{label}: {exc!r} (svcd exit status {d.proc.poll()})")
            return
        if out and not re.match(rb"HTTP/1\.1 (4\d\d|505) ", out) and not (
                label.startswith("random") and re.match(rb"HTTP/1\.1 [2-4]\d\d ", out)):
            failures.append(f"{label}: {out[:60]!r}")

    async with trio.open_nursery() as n:
        for label, data in _raw_cases(rng):
            n.start_soon(one, label, data)
    # a slowloris: a head trickled in is cut off with a 408 once the head timeout passes
    start = time.monotonic()
    try:
        out = await trio.to_thread.run_sync(_slowloris, d.sock, head_timeout + 10)
    except OSError as exc:  # no socket to connect to: the daemon went
        failures.append(f"slowloris: {exc!r} (svcd exit status {d.proc.poll()})")
        return failures
    if not out.startswith(b"HTTP/1.1 408") or time.monotonic() - start > head_timeout + 5:
        failures.append(f"slowloris: {out[:60]!r} after {time.monotonic() - start:.1f}s")
    return failures


HOSTILE_SERVERADDRESSES = ["reg\x00istry.local", "régistry.local", "r" * 300, "../../etc",
                           "registry.local:99999", "registry.local:0", "registry.local:x",
                           "a b", "http://..", "host:-1", "\u202e.local", ":5000", "[zz]:1"]


async def _hostile_registry_names(c: httpx.AsyncClient) -> list[str]:
    """``POST /auth`` (skipped by the schema fuzz: it would reach out) and the search term's
    registry with names that are no host: a 400 naming the field, nothing sent anywhere."""
    failures = []
    for address in HOSTILE_SERVERADDRESSES:
        r = await c.post("/auth", json={"username": "u", "password": "p",
                                        "serveraddress": address})
        if r.status_code != 400 or "invalid serveraddress" not in r.text:
            failures.append(f"/auth {address[:40]!r}: {r.status_code} {r.text[:80]}")
        first = address.split("/", 1)[0]
        if "." not in first and ":" not in first:
            continue  # not a registry in a search term: it would search Docker Hub
        r = await c.get("/images/search", params={"term": f"{address}/name"})
        if r.status_code != 400:
            failures.append(f"search {address[:40]!r}: {r.status_code} {r.text[:80]}")
    return failures


def _slowloris(sock_path: Path, timeout: float) -> bytes:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        s.connect(str(sock_path))
        out = b""
        for b in b"GET /info HTTP/1.1\r\nX-Slow: " + b"a" * 200:
            try:
                s.sendall(bytes([b]))
            except OSError:
                break
            s.settimeout(0.2)
            try:
                out += s.recv(4096)
            except TimeoutError:
                continue
            if out:
                break
        s.settimeout(timeout)
        try:
            while chunk := s.recv(4096):
                out += chunk
        except OSError:
            pass
        return out


async def test_fuzz_every_endpoint(spawn) -> None:  # type: ignore[no-untyped-def]
    if reason := skip_reason():
        pytest.skip(reason)
    head_timeout = 3.0
    d: Daemon = spawn(env={"SVC_HEAD_TIMEOUT": str(head_timeout)})
    assert d.proc is not None
    async with http_client(d.sock) as c:
        c.timeout = httpx.Timeout(60)
        ids = await fuzz.setup_objects(c)
        routes = await fuzz.routes(c)
    assert len(routes) > 45, routes
    await trio.sleep(2.5)  # the heap scavenger settles the start-up's garbage
    before = fuzz.rss(d.proc.pid)
    t0 = time.monotonic()
    bad = await fuzz.fuzz_requests(d.sock, ids, routes)
    t1 = time.monotonic()
    garbage = await _raw_garbage(d, head_timeout)
    assert d.proc.poll() is None, "\n".join([f"svcd exited ({d.proc.poll()}):", *garbage[:20],
                                             *d.log().splitlines()[-60:]])
    async with http_client(d.sock) as c:
        bad += await _hostile_registry_names(c)
    print(f"requests {t1 - t0:.1f}s, raw {time.monotonic() - t1:.1f}s")
    await trio.sleep(4.5)  # two scavenger rounds
    after = fuzz.rss(d.proc.pid)
    async with http_client(d.sock) as c:
        assert (await c.get("/_ping")).status_code == 200
        for item in (await c.get("/containers/json", params={"all": "1"})).json():
            await c.delete(f"/containers/{item['Id']}", params={"force": "1", "v": "1"})
    log = d.log()
    first_trace = log[log.index("Traceback") - 300:][:4000] if "Traceback" in log else ""
    errors = [line for line in log.splitlines() if " ERROR " in line][:20]
    assert bad == [], "\n".join([f"{len(bad)} failures (seed {fuzz.SEED}): {bad[:20]}", *errors,
                                  first_trace])
    assert garbage == [], "\n".join([*garbage[:20], "svcd's log ends:",
                                      *d.log().splitlines()[-40:]])
    assert after - before < RSS_GROWTH_MAX, (before >> 20, after >> 20)
    log = d.log()
    assert "Traceback" not in log, log[log.index("Traceback") - 2000:][:6000]

