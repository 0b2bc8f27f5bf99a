"""GET /events: live delivery, shapes per version, filters, since/until replay, slow readers,
persistence across restarts; the docker CLI and the SDK as clients."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import trio

from tests.conftest import docker_cli, http_client, run_sdk
from tests.support.daemon import Daemon
from tests.support.http import connect, dechunk, header, read_head


def uid() -> str:
    return uuid.uuid4().hex


async def publish(c: httpx.AsyncClient, n: int = 1, **kw: Any) -> int:
    params = {"n": str(n), **{k: (json.dumps(v) if k == "attrs" else v) for k, v in kw.items()}}
    r = await c.post("/_probe/events", params=params)
    assert r.status_code == 200
    return int(r.json()["time"])


async def replay(c: httpx.AsyncClient, since: int, until: int, prefix: str = "",
                 **params: str) -> list[dict[str, Any]]:
    r = await c.get(f"{prefix}/events", params={"since": f"{since / 1e9:.9f}",
                                                "until": f"{until / 1e9:.9f}", **params})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    return [json.loads(line) for line in r.text.splitlines()]


class Stream:
    """A raw events subscriber: headers are read at once, events as they arrive."""

    def __init__(self, s: trio.SocketStream) -> None:
        self.s = s
        self.buf = bytearray()
        self.body = bytearray()

    @classmethod
    async def open(cls, daemon: Daemon, query: str = "") -> Stream:
        s = await connect(daemon.sock)
        query = quote(query, safe="?&=")
        await s.send_all(f"GET /events{query} HTTP/1.1\r\nHost: svc\r\n\r\n".encode())
        st = cls(s)
        st.head = await read_head(s, st.buf)
        return st

    def _drain_chunks(self) -> None:
        while b"\r\n" in self.buf:
            j = self.buf.index(b"\r\n")
            size = int(bytes(self.buf[:j]), 16)
            if len(self.buf) < j + 2 + size + 2:
                return
            self.body += self.buf[j + 2 : j + 2 + size]
            del self.buf[: j + 2 + size + 2]

    async def events(self, n: int, timeout: float = 5) -> list[dict[str, Any]]:
        with trio.fail_after(timeout):
            while self.body.count(b"\n") < n:
                data = await self.s.receive_some(65536)
                assert data, "stream ended early"
                self.buf += data
                self._drain_chunks()
        lines = bytes(self.body).split(b"\n")
        out = [json.loads(x) for x in lines[:n]]
        self.body = bytearray(b"\n".join(lines[n:]))
        return out

    async def aclose(self) -> None:
        await self.s.aclose()


async def test_live_events_v122_shape(daemon: Daemon, client: httpx.AsyncClient) -> None:
    cid = uid()
    st = await Stream.open(daemon, "?filters=" + json.dumps({"container": [cid]}))
    assert st.head.startswith(b"HTTP/1.1 200")
    assert header(st.head, "Content-Type") == "application/json"
    assert header(st.head, "Transfer-Encoding") == "chunked"
    # registered before the headers went out: an event published right now is delivered
    await publish(client, type="container", action="create", id=cid,
                  attrs={"image": "busybox:latest", "name": "web", "com.example": "x"})
    [ev] = await st.events(1)
    await st.aclose()
    assert ev["Type"] == ev["type"] == "container"
    assert ev["Action"] == ev["action"] == ev["status"] == "create"
    assert ev["Actor"]["ID"] == ev["actor"]["id"] == ev["id"] == cid
    assert ev["Actor"]["Attributes"] == ev["actor"]["attributes"] == {
        "image": "busybox:latest", "name": "web", "com.example": "x"}
    assert ev["from"] == "busybox:latest"
    assert ev["time"] == ev["timeNano"] // 10**9 and abs(ev["time"] - time.time()) < 10


async def test_network_and_volume_events_have_no_legacy_fields(
        client: httpx.AsyncClient) -> None:
    t0 = time.time_ns()
    nid = uid()
    await publish(client, type="network", action="connect", id=nid,
                  attrs={"container": "abc", "name": "bridge", "type": "bridge"})
    [ev] = await replay(client, t0, time.time_ns(), filters=json.dumps({"network": [nid]}))
    assert ev["Type"] == "network" and ev["Action"] == "connect"
    assert "status" not in ev and "id" not in ev and "from" not in ev


async def test_legacy_shapes_before_v122(client: httpx.AsyncClient) -> None:
    t0 = time.time_ns()
    cid, vol = uid(), uid()
    await publish(client, type="container", action="die", id=cid,
                  attrs={"image": "busybox", "exitCode": "3"})
    await publish(client, type="volume", action="create", id=vol, attrs={"driver": "local"})
    t1 = time.time_ns()
    [v121] = await replay(client, t0, t1, prefix="/v1.21", filters=json.dumps({"container": [cid]}))
    assert v121 == {"status": "die", "id": cid, "from": "busybox", "time": v121["time"],
                    "timeNano": v121["timeNano"]}
    old = await replay(client, t0, t1, prefix="/v1.20")
    assert [e for e in old if e["id"] == cid] == [
        {"status": "die", "id": cid, "from": "busybox", "time": v121["time"]}]
    assert not [e for e in old if e.get("id") == vol]  # volume events have no legacy shape


async def test_filters(client: httpx.AsyncClient) -> None:
    t0 = time.time_ns()
    a, b, img = uid(), uid(), "sha256:" + uid()
    await publish(client, type="container", action="start", id=a,
                  attrs={"image": "repo/app:1", "name": "alpha", "tier": "web"})
    await publish(client, type="container", action="stop", id=b,
                  attrs={"image": "busybox", "name": "beta"})
    await publish(client, type="image", action="tag", id=img, attrs={"name": "repo/app:2"})
    t1 = time.time_ns()

    async def ids(**filters: list[str]) -> list[str]:
        evs = await replay(client, t0, t1, filters=json.dumps(filters))
        return [e["Actor"]["ID"] for e in evs if e["Actor"]["ID"] in (a, b, img)]

    assert await ids(container=[a[:12]]) == [a]
    assert await ids(container=["beta"]) == [b]
    assert await ids(event=["stop"]) == [b]
    assert await ids(type=["image"]) == [img]
    assert await ids(label=["tier=web"]) == [a]
    assert await ids(label=["tier"]) == [a]
    assert await ids(label=["tier=db"]) == []
    assert await ids(image=["repo/app"]) == [a, img]
    assert await ids(image=["busybox"]) == [b]
    assert await ids(type=["container"], event=["start", "stop"]) == [a, b]
    # the old map form the docker CLI sends to 1.23 daemons
    old = await replay(client, t0, t1, filters=json.dumps(
        {"container": {a: True}, "type": {"container": True}}))
    assert [e["id"] for e in old] == [a]


@pytest.mark.parametrize("prefix,filters,bad", [
    ("", {"bogus": ["x"]}, "bogus"),
    ("/v1.21", {"type": ["container"]}, "type"),
    ("/v1.20", {"label": ["a"]}, "label"),
    ("/v1.16", {"container": ["a"]}, "container"),
])
async def test_unknown_filters_per_version(client: httpx.AsyncClient, prefix: str,
                                           filters: dict[str, list[str]], bad: str) -> None:
    r = await client.get(f"{prefix}/events", params={"filters": json.dumps(filters)})
    assert r.status_code == 400
    assert r.text == f"Invalid filter '{bad}'\n"


@pytest.mark.parametrize("param", ["since", "until"])
async def test_bad_timestamps(client: httpx.AsyncClient, param: str) -> None:
    r = await client.get("/events", params={param: "yesterday"})
    assert r.status_code == 400 and param in r.text


async def test_since_until_replay_and_end(client: httpx.AsyncClient) -> None:
    cid = uid()
    t0 = time.time_ns()
    await publish(client, n=5, type="container", action="start", id=cid)
    t1 = time.time_ns()
    await publish(client, n=2, type="container", action="stop", id=cid)
    f = json.dumps({"container": [cid]})
    assert [e["Action"] for e in await replay(client, t0, t1, filters=f)] == ["start"] * 5
    # RFC 3339 is accepted too
    r = await client.get("/events", params={"since": f"{t0 / 1e9:.9f}", "filters": f,
                                            "until": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                   time.gmtime(t1 / 1e9 + 2))})
    assert [json.loads(x)["Action"] for x in r.text.splitlines()] == ["start"] * 5 + ["stop"] * 2


async def test_until_in_the_future_streams_live_then_ends(daemon: Daemon,
                                                          client: httpx.AsyncClient) -> None:
    cid = uid()
    until = time.time() + 1.5
    st = await Stream.open(daemon, f"?until={until:.9f}&filters="
                                   + json.dumps({"container": [cid]}))
    await publish(client, type="container", action="kill", id=cid)
    [ev] = await st.events(1)
    assert ev["Action"] == "kill"
    with trio.fail_after(5):  # a clean end of the chunked body, then the announced close
        while data := await st.s.receive_some():
            st.buf += data
    assert bytes(st.buf).endswith(b"0\r\n\r\n")
    assert time.time() >= until - 0.05
    assert header(st.head, "Connection") == "close"


async def test_slow_subscriber_is_cut_off_with_a_final_error(daemon: Daemon,
                                                             client: httpx.AsyncClient) -> None:
    cid = uid()
    s = await connect(daemon.sock)
    await s.send_all(("GET /events?filters=" + quote(json.dumps({"container": [cid]}))
                      + " HTTP/1.1\r\nHost: svc\r\n\r\n").encode())
    buf = bytearray()
    await read_head(s, buf)
    # the client reads nothing while 60k events are published (more than any socket buffers)
    await publish(client, n=60000, type="container", action="attach", id=cid)
    with trio.fail_after(20):
        while bytes(buf[-5:]) != b"0\r\n\r\n":
            buf += await s.receive_some(1 << 20)
    lines = dechunk(bytes(buf)).splitlines()
    last = json.loads(lines[-1])
    assert "error" in last and "fell more than 4096 events behind" in last["error"]
    assert last["errorDetail"]["message"] == last["error"]
    assert len(lines) - 1 < 60000
    # other subscribers and the daemon are unaffected
    assert (await client.get("/_ping")).text == "OK"


async def test_events_persist_across_restart(spawn) -> None:  # type: ignore[no-untyped-def]
    d = spawn()
    cid = uid()
    async with http_client(d.sock) as c:
        t0 = time.time_ns()
        await publish(c, n=3, type="container", action="create", id=cid)
    assert d.stop() == 0
    d.start()
    async with http_client(d.sock) as c:
        evs = await replay(c, t0, time.time_ns(), filters=json.dumps({"container": [cid]}))
    assert [e["Action"] for e in evs] == ["create"] * 3


def _publish_sync(daemon: Daemon, **kw: str) -> None:
    import socket as pysocket
    from urllib.parse import urlencode

    with pysocket.socket(pysocket.AF_UNIX) as s:
        s.connect(str(daemon.sock))
        s.sendall(f"POST /_probe/events?{urlencode(kw)} HTTP/1.1\r\nHost: svc\r\n"
                  "Content-Length: 0\r\nConnection: close\r\n\r\n".encode())
        while s.recv(65536):
            pass


def test_docker_cli_events_since_until(daemon: Daemon) -> None:
    cid = uid()
    since = time.time()
    _publish_sync(daemon, type="container", action="start", id=cid,
                  attrs=json.dumps({"image": "busybox", "name": "clitest"}), n="1")
    _publish_sync(daemon, type="image", action="tag", id="sha256:" + cid,
                  attrs=json.dumps({"name": "busybox:cli"}), n="1")
    until = time.time() + 0.5
    out = docker_cli(daemon.url, "events", "--since", f"{since:.3f}", "--until", f"{until:.3f}",
                     "--filter", f"container={cid}", "--format", "{{json .}}")
    assert out.returncode == 0, out.stderr
    [ev] = [json.loads(x) for x in out.stdout.splitlines()]
    assert ev["Action"] == "start" and ev["Actor"]["Attributes"]["name"] == "clitest"
    plain = docker_cli(daemon.url, "events", "--since", f"{since:.3f}", "--until",
                       f"{until:.3f}", "--filter", "type=image", "--filter", "event=tag")
    assert f"image tag sha256:{cid} (name=busybox:cli)" in plain.stdout


SDK_EVENTS = """
import json, sys, time, docker
c = docker.APIClient(base_url=sys.argv[1], version="1.23")
evs = list(c.events(since=float(sys.argv[2]), until=float(sys.argv[3]), decode=True,
                    filters={"container": sys.argv[4]}))
print(json.dumps(evs))
"""


def test_sdk7_events_decode(daemon: Daemon) -> None:
    cid = uid()
    since = time.time()
    _publish_sync(daemon, type="container", action="pause", id=cid, n="2")
    until = time.time() + 0.2
    evs = json.loads(run_sdk("sdk7", SDK_EVENTS, daemon.url, f"{since}", f"{until}", cid))
    assert [e["Action"] for e in evs] == ["pause", "pause"]
    assert all(e["id"] == cid and e["status"] == "pause" for e in evs)
