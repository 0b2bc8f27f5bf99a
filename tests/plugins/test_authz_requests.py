"""What an authorization plugin is sent, on a daemon's unix socket (no TLS: no user), and that
no kind of request gets past it: plain routes, the one-packet fast path, JSON routes, streams,
hijacked connections, a websocket, a build's body read from the socket, unknown paths."""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import docker_cli
from tests.support import images as timg
from tests.support.daemon import Daemon, import_busybox
from tests.support.plugins.process import PluginProcess


class Guarded:
    def __init__(self, daemon: Daemon, plugin: PluginProcess) -> None:
        self.daemon, self.plugin = daemon, plugin

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.HTTPTransport(uds=str(self.daemon.sock)),
                            base_url="http://svc", timeout=60)

    def rules(self, rules: list[dict[str, Any]]) -> None:
        tmp = self.plugin.state / "rules.json.tmp"
        tmp.write_text(json.dumps(rules))
        tmp.replace(self.plugin.state / "rules.json")

    def asked(self, method: str, uri: str, phase: str = "AuthZPlugin.AuthZReq") \
            -> list[dict[str, Any]]:
        return [c["body"] for c in self.plugin.calls(phase)
                if c["body"]["RequestMethod"] == method and c["body"]["RequestUri"] == uri]


@pytest.fixture(scope="module")
def guarded() -> Iterator[Guarded]:
    d = Daemon(["--authorization-plugin", "authz"])
    plugin = PluginProcess("authz", "authz", socket_dir=d.plugin_dir)
    try:
        plugin.start()
        d.start()
        import_busybox(d)
        g = Guarded(d, plugin)
        yield g
    finally:
        d.cleanup()
        plugin.stop()


@pytest.fixture
def allow_all(guarded: Guarded) -> Iterator[Guarded]:
    guarded.rules([])
    yield guarded
    guarded.rules([])


def decoded(doc: dict[str, Any], key: str) -> Any:
    return json.loads(base64.b64decode(doc[key]))


def test_a_json_create_and_its_answer(allow_all: Guarded) -> None:
    g = allow_all
    spec = {"Image": "busybox", "Cmd": ["true"], "Labels": {"who": "req-json"}}
    with g.client() as c:
        r = c.post("/v1.23/containers/create", params={"name": "req-json"}, json=spec,
                   headers={"X-Registry-Auth": "c2VjcmV0", "Authorization": "Bearer t",
                            "X-Registry-Config": "e30="})
        assert r.status_code == 201, r.text
        c.delete("/v1.23/containers/req-json")
    uri = "/v1.23/containers/create?name=req-json"
    req = g.asked("POST", uri)[-1]
    assert "User" not in req and "UserAuthNMethod" not in req  # no certificate, no user
    assert decoded(req, "RequestBody") == spec
    headers = req["RequestHeaders"]
    assert headers["Content-Type"] == "application/json"
    assert headers["User-Agent"].startswith("python-httpx/")
    assert not {"X-Registry-Auth", "Authorization", "X-Registry-Config"} & set(headers)
    res = g.asked("POST", uri, "AuthZPlugin.AuthZRes")[-1]
    assert res["ResponseStatusCode"] == 201
    assert res["ResponseHeaders"]["Content-Type"] == "application/json"
    assert decoded(res, "ResponseBody")["Id"] == r.json()["Id"]
    assert decoded(res, "RequestBody") == spec  # the request's part comes again


def test_large_and_non_json_bodies_are_not_sent(allow_all: Guarded) -> None:
    g = allow_all
    big = {"Image": "busybox", "Cmd": ["true"], "Labels": {"big": "x" * (1 << 20)}}
    with g.client() as c:
        r = c.post("/v1.23/containers/create", params={"name": "req-big"}, json=big)
        assert r.status_code == 201, r.text
        c.delete("/v1.23/containers/req-big")
        # a chunked JSON body under 1 MiB is read and sent (the engines sent none: their
        # check was Content-Length > 0, which let a chunked create through unseen)
        small = json.dumps({"Image": "busybox", "Cmd": ["true"],
                            "Labels": {"via": "chunks"}}).encode()
        r = c.post("/v1.23/containers/create", params={"name": "req-chunked"},
                   content=iter([small[:10], small[10:]]),
                   headers={"Content-Type": "application/json"})
        assert r.status_code == 201, r.text
        c.delete("/v1.23/containers/req-chunked")
        r = c.post("/v1.23/images/create", params={"fromSrc": "-", "repo": "req-tar"},
                   content=timg.busybox_rootfs_tar(),
                   headers={"Content-Type": "application/x-tar"})
        assert r.status_code == 200 and "error" not in r.text, r.text
        r = c.post("/v1.23/auth", json={"username": "u", "password": "p",
                                        "serveraddress": "127.0.0.1:1"})
        c.delete("/v1.23/images/req-tar")
    assert "RequestBody" not in g.asked("POST", "/v1.23/containers/create?name=req-big")[-1]
    chunked = g.asked("POST", "/v1.23/containers/create?name=req-chunked")[-1]
    assert decoded(chunked, "RequestBody")["Labels"] == {"via": "chunks"}
    tar = g.asked("POST", "/v1.23/images/create?fromSrc=-&repo=req-tar")[-1]
    assert "RequestBody" not in tar and tar["RequestHeaders"]["Content-Type"] == \
        "application/x-tar"
    auth = g.asked("POST", "/v1.23/auth")[-1]  # credentials never go out
    assert "RequestBody" not in auth
    assert all("ResponseBody" not in d for d in g.asked("POST", "/v1.23/auth",
                                                        "AuthZPlugin.AuthZRes"))


def test_the_uri_as_sent_and_a_list_as_answered(allow_all: Guarded) -> None:
    g = allow_all
    with g.client() as c:
        c.post("/v1.23/containers/create", params={"name": "req-ps"},
               json={"Image": "busybox", "Cmd": ["true"]}).raise_for_status()
        uri = "/v1.23/containers/json?all=1&filters=%7B%22name%22%3A%5B%22req-ps%22%5D%7D"
        r = c.get(uri)
        assert r.status_code == 200 and len(r.json()) == 1
        assert c.get("/_ping").text == "OK"
        c.delete("/v1.23/containers/req-ps")
    res = g.asked("GET", uri, "AuthZPlugin.AuthZRes")[-1]
    assert res["ResponseStatusCode"] == 200
    assert [e["Names"] for e in decoded(res, "ResponseBody")] == [["/req-ps"]]
    ping = g.asked("GET", "/_ping", "AuthZPlugin.AuthZRes")[-1]
    assert ping["ResponseStatusCode"] == 200 and "ResponseBody" not in ping  # text/plain


def test_no_user_on_the_unix_socket_and_the_plugin_still_decides(guarded: Guarded) -> None:
    g = guarded
    g.rules([{"user": "", "method": "DELETE", "msg": "nobody without a certificate"}])
    try:
        with g.client() as c:
            c.post("/v1.23/containers/create", params={"name": "req-nouser"},
                   json={"Image": "busybox", "Cmd": ["true"]}).raise_for_status()
        out = docker_cli(g.daemon.url, "rm", "req-nouser")
        assert out.returncode == 1
        assert "Error response from daemon: authorization denied by plugin authz: nobody " \
               "without a certificate" in out.stderr
        req = g.asked("DELETE", "/v1.23/containers/req-nouser")[-1]
        assert "User" not in req and "UserAuthNMethod" not in req
    finally:
        g.rules([])
        with g.client() as c:
            c.delete("/v1.23/containers/req-nouser")


# -- no kind of request gets past the plugins ---------------------------------------------

def raw_exchange(sock_path: Path, data: bytes) -> bytes:
    """``data`` sent in one write (a one-packet head takes the fast path when it is on), and
    what comes back until the daemon closes or the answer is whole."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(sock_path))
        s.sendall(data)
        got = b""
        while b"\r\n\r\n" not in got or not got.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        return got


def test_every_kind_of_route_is_put_to_the_plugin(guarded: Guarded) -> None:
    g = guarded
    with g.client() as c:
        cid = c.post("/v1.23/containers/create", params={"name": "req-kinds"},
                     json={"Image": "busybox", "Cmd": ["sleep", "30"],
                           "OpenStdin": True}).json()["Id"]
        c.post(f"/v1.23/containers/{cid}/start").raise_for_status()
        eid = c.post(f"/v1.23/containers/{cid}/exec",
                     json={"Cmd": ["true"], "AttachStdout": True}).json()["Id"]
    g.rules([{"msg": "closed today"}])  # everything, every phase
    context = _build_context()
    kinds = {  # what each request is, as a client sends it
        "the one-packet fast path": b"GET /_ping HTTP/1.1\r\nHost: d\r\n\r\n",
        "a HEAD": b"HEAD /_ping HTTP/1.1\r\nHost: d\r\nConnection: close\r\n\r\n",
        "a plain route": b"GET /v1.23/version HTTP/1.1\r\nHost: d\r\nConnection: close\r\n\r\n",
        "the container list": b"GET /v1.23/containers/json HTTP/1.1\r\nHost: d\r\n\r\n",
        "an inspect": f"GET /v1.23/containers/{cid}/json HTTP/1.1\r\nHost: d\r\n\r\n".encode(),
        "the events stream": b"GET /v1.23/events HTTP/1.1\r\nHost: d\r\n\r\n",
        "a JSON route": f"POST /v1.23/containers/{cid}/pause HTTP/1.1\r\nHost: d\r\n"
                        "Content-Length: 0\r\n\r\n".encode(),
        "logs -f": f"GET /v1.23/containers/{cid}/logs?follow=1&stdout=1 HTTP/1.1\r\n"
                   "Host: d\r\n\r\n".encode(),
        "stats": f"GET /v1.23/containers/{cid}/stats HTTP/1.1\r\nHost: d\r\n\r\n".encode(),
        "an archive": f"GET /v1.23/containers/{cid}/archive?path=/etc HTTP/1.1\r\n"
                      "Host: d\r\n\r\n".encode(),
        "a pull": b"POST /v1.23/images/create?fromImage=127.0.0.1:1/x&tag=1 HTTP/1.1\r\n"
                  b"Host: d\r\nContent-Length: 0\r\n\r\n",
        "a save": b"GET /v1.23/images/busybox/get HTTP/1.1\r\nHost: d\r\n\r\n",
        "an attach": f"POST /v1.23/containers/{cid}/attach?stream=1&stdin=1&stdout=1 "
                     "HTTP/1.1\r\nHost: d\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n"
                     "Content-Length: 0\r\n\r\n".encode(),
        "an exec start": f"POST /v1.23/exec/{eid}/start HTTP/1.1\r\nHost: d\r\n"
                         "Content-Type: application/json\r\nConnection: Upgrade\r\n"
                         "Upgrade: tcp\r\nContent-Length: 16\r\n\r\n"
                         '{"Detach":false}'.encode(),
        "a websocket": f"GET /v1.23/containers/{cid}/attach/ws?stream=1&stdout=1 HTTP/1.1\r\n"
                       "Host: d\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                       "Sec-WebSocket-Version: 13\r\n"
                       "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n".encode(),
        "a build's body from the socket": b"POST /v1.23/build?t=req-kinds-built HTTP/1.1\r\n"
                                          b"Host: d\r\nContent-Type: application/x-tar\r\n"
                                          b"Content-Length: %d\r\n\r\n" % len(context)
                                          + context,
        "an unknown path": b"GET /v1.23/nothing/here HTTP/1.1\r\nHost: d\r\n\r\n",
        "a version out of range": b"GET /v9.99/info HTTP/1.1\r\nHost: d\r\n\r\n",
    }
    try:
        for what, data in kinds.items():
            got = raw_exchange(g.daemon.sock, data)
            assert got.startswith(b"HTTP/1.1 403 "), (what, got[:300])
            if not data.startswith(b"HEAD"):
                assert got.endswith(b"authorization denied by plugin authz: closed today\n"), \
                    (what, got[-300:])
            line = data.split(b"\r\n", 1)[0].decode()
            method, target = line.split(" ")[:2]
            assert g.asked(method, target), (what, "not asked")
        with g.client() as c:  # and none of them happened
            g.rules([])
            state = c.get(f"/v1.23/containers/{cid}/json").json()["State"]
            assert state["Running"] and not state["Paused"]
            assert c.get("/v1.23/images/req-kinds-built/json").status_code == 404
    finally:
        g.rules([])
        with g.client() as c:
            c.delete(f"/v1.23/containers/{cid}", params={"force": 1})


def _build_context() -> bytes:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = b"FROM busybox\nLABEL built=yes\n"
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_an_allowed_websocket_attach_and_its_authz_res(allow_all: Guarded) -> None:
    g = allow_all
    with g.client() as c:
        cid = c.post("/v1.23/containers/create", params={"name": "req-ws"},
                     json={"Image": "busybox", "Cmd": ["sh", "-c", "echo ws-out; sleep 30"]}
                     ).json()["Id"]
        c.post(f"/v1.23/containers/{cid}/start").raise_for_status()
    target = f"/v1.23/containers/{cid}/attach/ws?logs=1&stream=1&stdout=1"
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(str(g.daemon.sock))
            s.sendall(f"GET {target} HTTP/1.1\r\nHost: d\r\nConnection: Upgrade\r\n"
                      "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
                      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n".encode())
            got = b""
            while b"ws-out" not in got:
                chunk = s.recv(4096)
                assert chunk, got
                got += chunk
            assert got.startswith(b"HTTP/1.1 101 "), got[:200]
        deadline = time.monotonic() + 10
        while not g.asked("GET", target, "AuthZPlugin.AuthZRes"):  # once the session ended
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert g.asked("GET", target, "AuthZPlugin.AuthZRes")[-1]["ResponseStatusCode"] == 101
    finally:
        with g.client() as c:
            c.delete(f"/v1.23/containers/{cid}", params={"force": 1})
